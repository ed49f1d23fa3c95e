-- 0020: quiet hours in enqueue() as msgq send applies them at enqueue
-- (internal/cli/send_quiet.go, internal/quiet; docs/sql-enqueue.md).
--
-- `msgq migrate` records each identity's quiet policy in sql_identities
-- (its window, zone name and exempt lanes and purposes); the library's
-- number-prefix to time-zone map is generated into phone_metadata.sql
-- (phonetz_test.go) as phone_timezones' rows, loaded by Migrate with the
-- rest of the phone metadata. enqueue() then accepts a window as
-- quiet_hours (quiet.Parse's grammar and words), and with quiet_hours
-- NULL applies the identity's: a send due inside the window in the
-- recipient's zone is due at its end (quiet.Window.Ends), one whose
-- deadline is not after that end is refused, and one whose zone is not
-- known is refused. The signature is 0019's (CREATE OR REPLACE).

ALTER TABLE sql_identities
    ADD COLUMN quiet_window          text,                         -- quiet_hours, as quiet.Window.String writes it; NULL: none
    ADD COLUMN quiet_zone            text,                         -- quiet_zone's name; NULL: none
    ADD COLUMN quiet_exempt_lanes    text[] NOT NULL DEFAULT '{}',
    ADD COLUMN quiet_exempt_purposes text[] NOT NULL DEFAULT '{}';

-- phone_timezones is the phonenumbers library's prefix_to_timezone map
-- (GetTimezonesForPrefix): an E.164 number's zones are those of the
-- longest prefix of its digits present, however many zones it has.
CREATE TABLE phone_timezones (
    prefix text COLLATE "C" PRIMARY KEY, -- leading digits of an E.164 number, without the +
    zones  text[] NOT NULL
);

-- phone_metadata.sql now fills phone_timezones too: forget which build
-- loaded it, so Migrate loads it again after this migration.
DELETE FROM phone_metadata_version;

-- go_quote is Go's %q (strconv.Quote) for the messages quiet.Parse writes:
-- backslash escapes for the quote, backslash and ASCII controls, \u or \U
-- for what unicode.IsPrint refuses (the separators, C1 controls, format
-- characters and private use listed; an unassigned code point, which Go
-- escapes too, is kept as it is).
CREATE FUNCTION go_quote(s text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    out text := '"';
    c   text;
    n   integer;
BEGIN
    FOR i IN 1..char_length(s) LOOP
        c := substr(s, i, 1);
        n := ascii(c);
        out := out || CASE
            WHEN c = '"' THEN '\"'
            WHEN c = '\' THEN '\\'
            WHEN n = 7 THEN '\a'
            WHEN n = 8 THEN '\b'
            WHEN n = 12 THEN '\f'
            WHEN n = 10 THEN '\n'
            WHEN n = 13 THEN '\r'
            WHEN n = 9 THEN '\t'
            WHEN n = 11 THEN '\v'
            WHEN n < 32 OR n = 127 THEN '\x' || lpad(to_hex(n), 2, '0')
            WHEN n < 127 THEN c
            WHEN n BETWEEN 128 AND 160 OR n = 173 OR n BETWEEN 1536 AND 1541 OR n = 1564 OR n = 1757 OR n = 1807
                OR n BETWEEN 2192 AND 2193 OR n = 2274 OR n = 5760 OR n = 6158 OR n BETWEEN 8192 AND 8207
                OR n BETWEEN 8232 AND 8239 OR n BETWEEN 8287 AND 8292 OR n BETWEEN 8294 AND 8303 OR n = 12288
                OR n BETWEEN 57344 AND 63743 OR n = 65279 OR n BETWEEN 65529 AND 65531 THEN '\u' || lpad(to_hex(n), 4, '0')
            WHEN n IN (69821, 69837) OR n BETWEEN 78896 AND 78911 OR n BETWEEN 113824 AND 113827 OR n BETWEEN 119155 AND 119162
                OR n = 917505 OR n BETWEEN 917536 AND 917631 OR n BETWEEN 983040 AND 1114111 THEN '\U' || lpad(to_hex(n), 8, '0')
            ELSE c END;
    END LOOP;
    RETURN out || '"';
END $$;

-- quiet_clock is internal/quiet's clock: HH:MM as fmt.Sscanf("%02d:%02d")
-- reads it (each field two characters at most, a sign allowed, blanks
-- before the minutes skipped and counted, what follows them ignored),
-- after strings.TrimSpace and a five-byte, colon-third check.
CREATE FUNCTION quiet_clock(s text, is_end boolean, OUT mins integer, OUT err text) LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    ws text := E' \t\n\x0b\f\r\u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000';
    t  text := btrim(s, ws);
    h  integer;
    m  integer;
    a  text;
    b  text;
BEGIN
    IF octet_length(t) <> 5 OR get_byte(convert_to(t, 'UTF8'), 2) <> 58 THEN
        err := format('%s is not HH:MM', go_quote(t));
        RETURN;
    END IF;
    a := split_part(t, ':', 1);
    b := substr(t, length(a) + 2);
    -- Hours: a sign or a digit, then a digit (a lone digit would leave
    -- the colon to a second character that is not one).
    IF a !~ '^[-+0-9][0-9]$' THEN
        err := format('%s is not HH:MM', go_quote(t));
        RETURN;
    END IF;
    h := a::integer;
    -- Minutes: fmt's blanks (newline excepted) then a digit, or a sign or
    -- digit then a digit, or a digit and anything.
    IF b ~ '^[ \t\x0b\f\r][0-9]$' THEN
        m := substr(b, 2)::integer;
    ELSIF b ~ '^[-+0-9][0-9]$' THEN
        m := b::integer;
    ELSIF b ~ '^[0-9]' THEN
        m := left(b, 1)::integer;
    ELSE
        err := format('%s is not HH:MM', go_quote(t));
        RETURN;
    END IF;
    IF is_end AND h = 24 AND m = 0 THEN
        mins := 1440;
        RETURN;
    END IF;
    IF h < 0 OR h > 23 OR m < 0 OR m > 59 THEN
        err := format('%s is not a time of day', go_quote(t));
        RETURN;
    END IF;
    mins := h * 60 + m;
END $$;

-- quiet_parse is quiet.Parse: w_start and w_end in minutes after local
-- midnight, or err in its words.
CREATE FUNCTION quiet_parse(s text, OUT w_start integer, OUT w_end integer, OUT err text) LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    ws text := E' \t\n\x0b\f\r\u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000';
    t  text := btrim(s, ws);
    i  integer := strpos(t, '-');
    c  record;
BEGIN
    IF i = 0 THEN
        err := format('quiet hours %s: want HH:MM-HH:MM, e.g. 21:00-08:00', go_quote(s));
        RETURN;
    END IF;
    c := quiet_clock(left(t, i - 1), false);
    IF c.err IS NOT NULL THEN
        err := format('quiet hours %s: start: %s', go_quote(s), c.err);
        RETURN;
    END IF;
    w_start := c.mins;
    c := quiet_clock(substr(t, i + 1), true);
    IF c.err IS NOT NULL THEN
        w_start := NULL;
        err := format('quiet hours %s: end: %s', go_quote(s), c.err);
        RETURN;
    END IF;
    w_end := c.mins % 1440;
    IF w_start = w_end THEN
        w_start := NULL;
        w_end := NULL;
        err := format('quiet hours %s: start and end are the same time', go_quote(s));
    END IF;
END $$;

-- quiet_window_text is quiet.Window.String.
CREATE FUNCTION quiet_window_text(w_start integer, w_end integer) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT format('%s:%s-%s:%s', lpad((w_start / 60)::text, 2, '0'), lpad((w_start % 60)::text, 2, '0'),
        lpad((w_end / 60)::text, 2, '0'), lpad((w_end % 60)::text, 2, '0'))
$$;

-- quiet_in is quiet.Window.Quiet: t's local hour and minute in zone
-- inside [w_start, w_end), a window across midnight when start > end.
CREATE FUNCTION quiet_in(w_start integer, w_end integer, t timestamptz, zone text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN w_start < w_end THEN tod >= w_start AND tod < w_end ELSE tod >= w_start OR tod < w_end END
    FROM (SELECT (extract(hour FROM l) * 60 + extract(minute FROM l))::integer AS tod
          FROM (SELECT t AT TIME ZONE zone AS l) a) b
$$;

-- quiet_offset is zone's UTC offset at the instant t.
CREATE FUNCTION quiet_offset(t timestamptz, zone text) RETURNS interval LANGUAGE sql STABLE AS $$
    SELECT (t AT TIME ZONE zone) - (t AT TIME ZONE 'UTC')
$$;

-- quiet_ends is quiet.Window.Ends: the first instant at or after t
-- outside the window in zone. The candidate is the window's end on t's
-- local day (the next day for a window across midnight seen from its
-- evening), placed as Go's time.Date places a wall-clock time (the
-- offset at the wall time read as UTC, then, if that offset's instant
-- differs, the offset at that instant: so a time a spring-forward skips
-- or a fall-back repeats lands where Go's does, which is not where
-- PostgreSQL's own AT TIME ZONE puts it). It is taken when it is the first
-- minute outside; otherwise the minutes from t are walked, as Ends does.
CREATE FUNCTION quiet_ends(w_start integer, w_end integer, t timestamptz, zone text) RETURNS timestamptz LANGUAGE plpgsql STABLE AS $$
DECLARE
    l    timestamp := t AT TIME ZONE zone;
    d    date := l::date;
    wall timestamptz;
    off  interval;
    c    timestamptz;
BEGIN
    IF NOT quiet_in(w_start, w_end, t, zone) THEN
        RETURN t;
    END IF;
    IF w_start > w_end AND (extract(hour FROM l) * 60 + extract(minute FROM l))::integer >= w_start THEN
        d := d + 1;
    END IF;
    wall := (d + make_interval(mins => w_end)) AT TIME ZONE 'UTC';
    off := quiet_offset(wall, zone);
    IF off <> interval '0' THEN
        off := quiet_offset(wall - off, zone);
    END IF;
    c := wall - off;
    IF c > t AND NOT quiet_in(w_start, w_end, c, zone) AND quiet_in(w_start, w_end, c - interval '1 minute', zone) THEN
        RETURN c;
    END IF;
    c := date_trunc('minute', t, 'UTC');
    FOR i IN 1..3 * 1440 LOOP
        c := c + interval '1 minute';
        EXIT WHEN NOT quiet_in(w_start, w_end, c, zone);
    END LOOP;
    RETURN c;
END $$;

-- quiet_number_zone is quiet.ZoneOf's answer for an E.164 number: the
-- zone of the longest prefix phone_timezones has, when it is exactly one
-- known zone; NULL otherwise (several, Etc/Unknown, or no prefix).
CREATE FUNCTION quiet_number_zone(e164 text) RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN cardinality(z.zones) = 1 AND z.zones[1] <> 'Etc/Unknown' THEN z.zones[1] END
    FROM (SELECT ltrim(e164, '+') AS d) n
    CROSS JOIN LATERAL (SELECT p.zones FROM phone_timezones p
        WHERE p.prefix IN (SELECT left(n.d, k) FROM generate_series(1, length(n.d)) k)
        ORDER BY length(p.prefix) DESC LIMIT 1) z
$$;

-- enqueue is 0019's with quiet hours applied at enqueue.
CREATE OR REPLACE FUNCTION enqueue(
    key             text,
    to_addr         text,
    identity        text        DEFAULT NULL,
    channel         text        DEFAULT NULL,
    tenant          text        DEFAULT NULL,
    region          text        DEFAULT NULL,
    template        text        DEFAULT NULL,
    lang            text        DEFAULT NULL,
    params          text[]      DEFAULT NULL,
    text            text        DEFAULT NULL,
    subject         text        DEFAULT NULL,
    fallback_template text      DEFAULT NULL,
    fallback_params text[]      DEFAULT NULL,
    purpose         text        DEFAULT NULL,
    ref             text        DEFAULT NULL,
    lane            text        DEFAULT NULL,
    not_before      timestamptz DEFAULT NULL,
    not_before_in   interval    DEFAULT NULL,
    expires_at      timestamptz DEFAULT NULL,
    expires_in      interval    DEFAULT NULL,
    quiet_hours     text        DEFAULT NULL
) RETURNS text LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    now_    timestamptz := clock_timestamp();
    v_key   text := coalesce(enqueue.key, '');
    v_ten   text := coalesce(nullif(enqueue.tenant, ''), 'default');
    v_id    text := nullif(enqueue.identity, '');
    v_ch    text := nullif(enqueue.channel, '');
    v_tpl   text := coalesce(enqueue.template, '');
    v_lang  text := coalesce(enqueue.lang, '');
    v_par   text[] := coalesce(enqueue.params, '{}');
    v_txt   text := coalesce(enqueue.text, '');
    v_subj  text := coalesce(enqueue.subject, '');
    v_fbt   text := coalesce(enqueue.fallback_template, '');
    v_fbp   text[] := coalesce(enqueue.fallback_params, '{}');
    v_lane  text := coalesce(nullif(enqueue.lane, ''), 'bulk');
    v_qh    text := coalesce(enqueue.quiet_hours, '');
    v_body  text;
    v_next  timestamptz;
    v_exp   timestamptz;
    v_to    text;
    chans   text[];
    ph      record;
    em      record;
    v_payload text;
    v_hash  text;
    v_new   text;
    v_old   record;
    v_min   bigint;
    v_maxseg integer;
    seg     record;
    v_rev   record;
    v_idq   record;
    v_qw    record;
    v_qzone text;
    v_ws    integer;
    v_we    integer;
    v_due   timestamptz;
    v_until timestamptz;
BEGIN
    -- The CLI's order (internal/cli/spec.go, then store.EnqueueParams.Validate).
    IF v_key = '' THEN
        PERFORM mq_invalid('key', 'is required');
    END IF;
    IF NOT v_key ~ '^[A-Za-z0-9._:-]{1,64}$' THEN
        PERFORM mq_invalid('key', format('"%s" must be 1 to 64 characters of A-Za-z0-9._:-', left(v_key, 70)));
    END IF;
    IF coalesce(enqueue.to_addr, '') = '' THEN
        PERFORM mq_invalid('to', 'is required');
    END IF;
    IF v_tpl <> '' AND v_lang = '' THEN
        v_lang := 'en';
    END IF;
    IF v_id IS NULL THEN
        SELECT name INTO v_id FROM sql_identities WHERE is_default;
        IF v_id IS NULL THEN
            PERFORM mq_invalid('identity', 'is required (no default identity recorded: run msgq migrate with the config)');
        END IF;
    END IF;
    SELECT channels INTO chans FROM sql_identities WHERE name = v_id;
    IF chans IS NULL THEN
        PERFORM mq_invalid('identity', format('%s is not an identity of the config msgq migrate recorded (%s)', v_id,
            coalesce((SELECT string_agg(name, ', ' ORDER BY name) FROM sql_identities), 'none')));
    END IF;
    IF v_ch IS NULL THEN
        v_ch := chans[1];
    ELSIF v_ch IN ('whatsapp', 'sms', 'email') AND NOT v_ch = ANY (chans) THEN
        PERFORM mq_invalid('channel', format('identity %s does not send on %s (it sends on %s)', v_id, v_ch, array_to_string(chans, ', ')));
    END IF;
    IF v_ch = 'email' THEN
        em := normalize_email(enqueue.to_addr);
        IF em.why IS NOT NULL THEN
            PERFORM mq_invalid('to', format('invalid email address "%s": %s', left(enqueue.to_addr, 70), em.why));
        END IF;
        v_to := em.addr;
    ELSE
        ph := normalize_phone(enqueue.to_addr, enqueue.region);
        IF ph.why IS NOT NULL THEN
            PERFORM mq_invalid('to', format('invalid phone number "%s": %s', left(enqueue.to_addr, 70), ph.why));
        END IF;
        v_to := ph.e164;
    END IF;
    -- internal/cli/spec.go's checkSegments: an SMS text over the
    -- identity's max_segments (recorded by msgq migrate) is refused.
    IF v_ch = 'sms' AND v_txt <> '' THEN
        SELECT max_segments INTO v_maxseg FROM sql_identities WHERE name = v_id;
        IF v_maxseg > 0 THEN
            seg := sms_segments(v_txt);
            IF seg.segments > v_maxseg THEN
                PERFORM mq_invalid('text', format('is %s SMS segments (%s, %s characters); identity %s allows at most %s (max_segments)',
                    seg.segments, seg.encoding, char_length(v_txt), v_id, v_maxseg));
            END IF;
        END IF;
    END IF;
    IF v_ch <> 'email' THEN
        IF v_subj <> '' THEN
            PERFORM mq_invalid('subject', format('is for email only (channel %s has no subject)', v_ch));
        END IF;
    ELSE
        IF v_fbt <> '' OR cardinality(v_fbp) > 0 THEN
            PERFORM mq_invalid('fallback_template', 'has no use on email (there is no customer-service window)');
        ELSIF v_subj ~ '[\r\n]' THEN
            PERFORM mq_invalid('subject', 'must be one line');
        ELSIF v_tpl <> '' THEN
            -- The CLI renders email templates from the identity's templates
            -- directory at enqueue; the database cannot.
            PERFORM mq_invalid('template', 'email templates cannot be rendered in SQL: give text and subject (or send it with msgq send)');
        ELSIF btrim(v_subj) = '' THEN
            PERFORM mq_invalid('subject', 'is required for an email with text');
        END IF;
    END IF;
    IF enqueue.not_before IS NOT NULL AND enqueue.not_before_in IS NOT NULL THEN
        PERFORM mq_invalid('not_before', 'give not_before or not_before_in, not both');
    END IF;
    IF enqueue.expires_at IS NOT NULL AND enqueue.expires_in IS NOT NULL THEN
        PERFORM mq_invalid('expires_in', 'give expires_in or expires_at, not both');
    END IF;
    -- Delays are exact durations (a day is 24 hours, as in msgq send's 2d),
    -- on the database server's clock.
    IF enqueue.expires_in IS NOT NULL THEN
        IF extract(epoch FROM enqueue.expires_in) <= 0 THEN
            PERFORM mq_invalid('expires_in', format('%s puts the expiry in the past', enqueue.expires_in));
        END IF;
        v_exp := now_ + make_interval(secs => extract(epoch FROM enqueue.expires_in));
    ELSE
        v_exp := enqueue.expires_at;
    END IF;
    IF enqueue.not_before_in IS NOT NULL THEN
        v_next := now_ + make_interval(secs => extract(epoch FROM enqueue.not_before_in));
    ELSE
        v_next := enqueue.not_before;
    END IF;
    IF NOT v_ten ~ '^[A-Za-z0-9._:-]{1,64}$' THEN
        PERFORM mq_invalid('tenant', 'must be 1 to 64 characters of A-Za-z0-9._:-');
    END IF;
    IF v_ch NOT IN ('whatsapp', 'sms', 'email') THEN
        -- The channels internal/recipient knows the addresses of.
        PERFORM mq_invalid('channel', format('must be whatsapp, sms or email (got "%s")', left(v_ch, 70)));
    END IF;
    IF v_lane NOT IN ('reply', 'bulk') THEN
        PERFORM mq_invalid('lane', format('must be reply or bulk (got "%s")', left(v_lane, 70)));
    END IF;
    IF v_txt <> '' AND v_tpl <> '' THEN
        PERFORM mq_invalid('text', 'cannot be combined with a template: send one or the other');
    ELSIF v_txt = '' AND v_tpl = '' THEN
        PERFORM mq_invalid('payload', 'needs a template or text');
    ELSIF v_tpl = '' AND btrim(v_txt, E' \t\n\x0b\f\r\u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000') = '' THEN
        PERFORM mq_invalid('text', 'is blank');
    ELSIF v_txt <> '' AND (v_lang <> '' OR cardinality(v_par) > 0) THEN
        PERFORM mq_invalid('text', 'takes no language or parameters (those belong to a template)');
    ELSIF v_fbt <> '' AND v_txt = '' THEN
        PERFORM mq_invalid('fallback_template', 'only applies to free-form text');
    ELSIF cardinality(v_fbp) > 0 AND v_fbt = '' THEN
        PERFORM mq_invalid('fallback_params', 'need a fallback_template');
    END IF;
    IF v_exp IS NOT NULL THEN
        IF v_exp <= now_ THEN
            PERFORM mq_invalid('expires_at', format('is in the past (%s)', to_char(v_exp AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')));
        END IF;
        IF v_next IS NOT NULL AND v_exp <= v_next THEN
            PERFORM mq_invalid('expires_at', 'is not after not_before: the message could never go out');
        END IF;
    END IF;
    -- internal/cli/send_quiet.go (quiet.Policy.Schedule), after the
    -- checks above: the send's own quiet_hours ('off', a window, or NULL
    -- for the identity's), then the window that applies, read in the
    -- recipient's zone; a send due inside it waits for its end.
    IF v_qh NOT IN ('', 'off') THEN
        v_qw := quiet_parse(v_qh);
        IF v_qw.err IS NOT NULL THEN
            PERFORM mq_invalid('quiet_hours', v_qw.err || ' (or off)');
        END IF;
        v_ws := v_qw.w_start;
        v_we := v_qw.w_end;
    END IF;
    SELECT quiet_window, quiet_zone, quiet_exempt_lanes, quiet_exempt_purposes INTO v_idq FROM sql_identities WHERE name = v_id;
    -- The identity's window, unless the lane or the purpose is exempt
    -- (quiet.Policy.window; an empty purpose is never exempt).
    IF v_qh = '' AND v_idq.quiet_window IS NOT NULL AND NOT v_lane = ANY (v_idq.quiet_exempt_lanes)
        AND NOT (coalesce(enqueue.purpose, '') <> '' AND enqueue.purpose = ANY (v_idq.quiet_exempt_purposes)) THEN
        v_qw := quiet_parse(v_idq.quiet_window);
        v_ws := v_qw.w_start;
        v_we := v_qw.w_end;
    END IF;
    IF v_ws IS NOT NULL THEN
        -- quiet.Zone: email has the identity's zone; a number its own when
        -- the library gives it exactly one, else the identity's.
        v_qzone := v_idq.quiet_zone;
        IF v_ch <> 'email' THEN
            v_qzone := coalesce(quiet_number_zone(v_to), v_qzone);
        END IF;
        IF v_qzone IS NULL THEN
            PERFORM mq_invalid('quiet_hours', v_qh || ': the number does not map to a single time zone and the identity has no quiet_zone');
        END IF;
        v_due := greatest(now_, coalesce(v_next, now_));
        IF quiet_in(v_ws, v_we, v_due, v_qzone) THEN
            v_until := quiet_ends(v_ws, v_we, v_due, v_qzone);
            IF v_exp IS NOT NULL AND v_exp <= v_until THEN
                PERFORM mq_invalid('quiet_hours', format('the message expires at %s, inside the recipient''s quiet hours %s (%s): waits until %s: it could never go out (send it with quiet_hours off, or exempt its lane or purpose)',
                    to_char(v_exp AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), quiet_window_text(v_ws, v_we), v_qzone,
                    to_char(v_until AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')));
            END IF;
            v_next := v_until;
        END IF;
    END IF;
    v_next := greatest(now_, coalesce(v_next, now_));

    -- store.Payload and store.EnqueueParams.BodyHash, byte for byte (the
    -- hash without quiet_hours: when a message may go is not what it says).
    v_body := concat_ws(',',
        CASE WHEN v_tpl <> '' THEN '"template":' || go_json(v_tpl) END,
        CASE WHEN v_lang <> '' THEN '"lang":' || go_json(v_lang) END,
        CASE WHEN cardinality(v_par) > 0 THEN '"params":' || go_json_array(v_par) END,
        CASE WHEN v_txt <> '' THEN '"text":' || go_json(v_txt) END,
        CASE WHEN v_subj <> '' AND v_ch = 'email' THEN '"subject":' || go_json(v_subj) END,
        CASE WHEN v_fbt <> '' THEN '"fallback_template":' || go_json(v_fbt) END,
        CASE WHEN cardinality(v_fbp) > 0 THEN '"fallback_params":' || go_json_array(v_fbp) END);
    v_payload := '{' || concat_ws(',', nullif(v_body, ''), CASE WHEN v_qh <> '' THEN '"quiet_hours":' || go_json(v_qh) END) || '}';
    v_hash := encode(sha256(convert_to('{"to":' || go_json(v_to) || ',"channel":' || go_json(v_ch) ||
        ',"identity":' || go_json(v_id) || ',"payload":{' || v_body || '}}', 'UTF8')), 'hex');

    v_new := new_ulid(now_);
    INSERT INTO messages (id, tenant, key, body_hash, recipient, channel, identity, purpose, trigger_ref, lane,
        payload, state, next_attempt_at, expires_at, resend_of, created_at, updated_at)
    VALUES (v_new, v_ten, v_key, v_hash, v_to, v_ch, v_id, coalesce(enqueue.purpose, ''), coalesce(enqueue.ref, ''), v_lane,
        v_payload, 'queued', v_next, v_exp, '', now_, now_)
    ON CONFLICT (tenant, key) DO NOTHING;
    IF FOUND THEN
        -- state.Transition(None, Enqueue): queued, source send (store.SourceSend).
        INSERT INTO history (message_id, seq, from_state, to_state, reason, event, applied, source, detail, at)
        VALUES (v_new, 1, '', 'queued', '', 'enqueue', true, 'send', '', now_);
        -- Delivered at commit, to drains waiting (notify.go's notifySQL).
        PERFORM pg_notify('msgq_enqueued', current_schema());
        RETURN v_new;
    END IF;

    SELECT m.id, m.body_hash, m.state, m.reason, m.attempts, m.maybe_sent, m.provider_id, m.payload IS NOT NULL AS has_payload
        INTO v_old FROM messages m WHERE m.tenant = v_ten AND m.key = v_key;
    IF NOT FOUND THEN
        -- The index refused the key, yet its row is not visible to this
        -- snapshot (a REPEATABLE READ transaction): retry the transaction.
        RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = format('msgq: key %s of tenant %s was taken concurrently; retry the transaction', v_key, v_ten);
    END IF;
    IF v_old.body_hash <> v_hash THEN
        RAISE EXCEPTION USING ERRCODE = 'MQ409', COLUMN = 'key',
            MESSAGE = format('msgq: key %s of tenant %s is taken by message %s with other content', v_key, v_ten, v_old.id),
            DETAIL = v_old.id,
            HINT = 'the existing message''s id is this error''s DETAIL; nothing was written';
    END IF;
    -- A row refused for a policy reason before any call keeps no claim on
    -- its key (internal/store/rules/revive.go): once the condition has
    -- lifted (the recipient no longer opted out of the row's identity) and
    -- no provider call was recorded, this send revives it through the
    -- machine's revive event, scheduled as this send says, instead of
    -- replaying the refusal. The row is locked and read again first, as
    -- the Go store does (another sender may have revived it since).
    IF v_old.state = 'failed' AND v_old.reason = 'opted_out' AND v_old.attempts = 0 AND NOT v_old.maybe_sent
        AND v_old.provider_id = '' AND v_old.has_payload THEN
        SELECT m.id, m.identity, m.recipient,
            (m.state = 'failed' AND m.reason = 'opted_out' AND m.attempts = 0 AND NOT m.maybe_sent AND m.provider_id = ''
                AND m.payload IS NOT NULL) AS candidate,
            EXISTS (SELECT 1 FROM opt_outs o WHERE o.identity = m.identity AND o.recipient = m.recipient AND o.opted_out) AS holds,
            EXISTS (SELECT 1 FROM attempts a WHERE a.message_id = m.id) AS called
            INTO v_rev FROM messages m WHERE m.id = v_old.id FOR UPDATE OF m;
        IF v_rev.candidate AND NOT v_rev.holds AND NOT v_rev.called THEN
            UPDATE messages SET state = 'queued', reason = '', next_attempt_at = v_next, expires_at = v_exp, last_error = '',
                updated_at = now_
            WHERE id = v_rev.id AND state = 'failed' AND reason = 'opted_out' AND attempts = 0;
            INSERT INTO history (message_id, seq, from_state, to_state, reason, event, applied, source, detail, at)
            SELECT v_rev.id, coalesce(max(seq), 0) + 1, 'failed', 'queued', '', 'revive(opted_out)', true, 'send',
                'enqueued again after a policy refusal that sent nothing: the recipient is no longer opted out of ' || v_rev.identity, now_
            FROM history WHERE message_id = v_rev.id;
            PERFORM pg_notify('msgq_enqueued', current_schema());
            RETURN v_rev.id;
        END IF;
    END IF;
    -- A replay: what the Go store counts (rules.RefusedCounts).
    v_min := floor(extract(epoch FROM now_) / 60)::bigint * 60;
    INSERT INTO counters (name, n) VALUES ('key_replays', 1) ON CONFLICT (name) DO UPDATE SET n = counters.n + 1;
    INSERT INTO counts_by_minute (name, minute, n) VALUES ('key_replays', v_min, 1)
        ON CONFLICT (name, minute) DO UPDATE SET n = counts_by_minute.n + 1;
    DELETE FROM counts_by_minute WHERE name = 'key_replays' AND minute < v_min - 8 * 24 * 3600;
    RETURN v_old.id;
END $$;

-- CREATE OR REPLACE drops a function's settings: every function reads
-- its own schema's tables again (0017's rule).
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['go_quote(text)', 'quiet_clock(text,boolean)', 'quiet_parse(text)', 'quiet_window_text(integer,integer)',
        'quiet_in(integer,integer,timestamptz,text)', 'quiet_offset(timestamptz,text)', 'quiet_ends(integer,integer,timestamptz,text)',
        'quiet_number_zone(text)',
        'enqueue(text,text,text,text,text,text,text,text,text[],text,text,text,text[],text,text,text,timestamptz,interval,timestamptz,interval,text)'] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_catalog, pg_temp', f, current_schema());
    END LOOP;
END $$;
