-- 0018: enqueue() as msgq send for what 0017 left to the CLI
-- (docs/sql-enqueue.md).
--
-- Phone numbers with letters: nyaruka/phonenumbers' Parse reads a vanity
-- number (three letters or more: keypad digits) and drops an extension
-- (ext. 89, x89, #, ;ext=89, ,,89); normalize_phone now reads them the
-- same way. Only ASCII is read (other scripts' digits and punctuation,
-- and RFC 3966 phone-context URIs, are refused: the documented narrowing).
--
-- SMS max_segments: see sms_segments below.
--
-- A replay of a row refused for an opt-out before any call revives it
-- once the recipient is no longer opted out, as msgq send does (enqueue
-- below).

-- phone_extension_re is the library's EXTN_PATTERNS_FOR_PARSING, its
-- ASCII alternatives (matched case-insensitively, anchored at the end).
CREATE FUNCTION phone_extension_re() RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT ';ext=[0-9]{1,20}'
        || '|[ \t,]*(?:e?xt(?:ensio)?n?|anexo)[:.]?[ \t,-]*[0-9]{1,20}#?'
        || '|[ \t,]*(?:[x#~]|int)[:.]?[ \t,-]*[0-9]{1,9}#?'
        || '|[- ]+[0-9]{1,6}#'
        || '|[ \t]*(?:,{2}|;)[:.]?[ \t,-]*[0-9]{1,15}#?'
        || '|[ \t]*,+[:.]?[ \t,-]*[0-9]{1,9}#?'
$$;

-- phone_viable is the library's isViablePhoneNumber (VALID_PHONE_NUMBER
-- and an optional extension, case-insensitive), for ASCII input.
CREATE FUNCTION phone_viable(num text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT octet_length(num) >= 2 AND num ~* ('^(?:[0-9]{2}|\+*(?:[][x ()./~*-]*[0-9]){3,}[][x ()./~*A-Za-z0-9-]*(?:'
        || phone_extension_re() || ')?)$')
$$;

-- phone_normalize is the library's normalize: with three letters or
-- more, letters become their keypad digits (a vanity number) and
-- anything else but digits is dropped; with fewer, only digits stay.
CREATE FUNCTION phone_normalize(num text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN num ~ '(?:[A-Za-z][^A-Za-z]*){3}'
        THEN regexp_replace(translate(upper(num), 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', '22233344455566677778889999'), '[^0-9]', '', 'g')
        ELSE regexp_replace(num, '[^0-9]', '', 'g') END
$$;

CREATE OR REPLACE FUNCTION phone_extract_calling_code(number text, dm phone_metadata, OUT cc integer, OUT nat text, OUT err text)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    full_num  text;
    from_dflt boolean := true;
    g         text[];
    pot       text;
BEGIN
    cc := 0;
    nat := '';
    IF number = '' THEN
        RETURN;
    END IF;
    IF left(number, 1) = '+' THEN
        full_num := phone_normalize(ltrim(number, '+'));
        from_dflt := false;
    ELSE
        full_num := phone_normalize(number);
        IF dm.region IS NOT NULL THEN
            g := regexp_match(full_num, '^((?:' || dm.intl_prefix || '))');
            -- An IDD is not followed by 0: calling codes never start with it.
            IF g IS NOT NULL AND substr(full_num, length(g[1]) + 1, 1) <> '0' THEN
                full_num := substr(full_num, length(g[1]) + 1);
                from_dflt := false;
            END IF;
        END IF;
    END IF;
    IF NOT from_dflt THEN
        IF length(full_num) <= 2 THEN
            err := 'phone number too short after idd';
            RETURN;
        END IF;
        IF left(full_num, 1) <> '0' THEN
            FOR i IN 1..least(3, length(full_num)) LOOP
                IF EXISTS (SELECT 1 FROM phone_metadata p WHERE p.calling_code = substr(full_num, 1, i)::integer) THEN
                    cc := substr(full_num, 1, i)::integer;
                    nat := substr(full_num, i + 1);
                    RETURN;
                END IF;
            END LOOP;
        END IF;
        err := 'invalid country code';
        RETURN;
    END IF;
    IF dm.region IS NOT NULL AND starts_with(full_num, dm.calling_code::text) THEN
        pot := phone_strip_national_prefix(substr(full_num, length(dm.calling_code::text) + 1), dm);
        IF (NOT full_num ~ ('^(?:' || dm.national_pattern || ')$') AND pot ~ ('^(?:' || dm.national_pattern || ')$'))
            OR phone_length(full_num, dm.possible_lengths, dm.local_only_lengths) = 'too_long' THEN
            cc := dm.calling_code;
            nat := pot;
            RETURN;
        END IF;
    END IF;
END $$;

-- normalize_phone is internal/phone.Normalize (0017's, now with letters
-- and extensions read as the library reads them).
CREATE OR REPLACE FUNCTION normalize_phone(raw text, region text, OUT e164 text, OUT why text) LANGUAGE plpgsql STABLE AS $$
DECLARE
    -- strings.TrimSpace's white space.
    ws   text := E' \t\n\x0b\f\r\u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000';
    s    text := btrim(coalesce(raw, ''), ws);
    reg  text := upper(btrim(coalesce(region, ''), ws));
    dm   phone_metadata;
    m    phone_metadata;
    num  text;
    r    record;
    pot  text;
    nat  text;
    cc   integer;
    st   text;
    i    integer;
BEGIN
    IF s = '' THEN
        why := 'empty';
        RETURN;
    END IF;
    IF left(s, 1) <> '+' THEN
        IF reg = '' THEN
            why := 'a local number needs a region (e.g. region => ''US'') or a leading +country code';
            RETURN;
        END IF;
        IF reg = '001' OR NOT EXISTS (SELECT 1 FROM phone_metadata p WHERE p.region = reg) THEN
            why := format('unknown region "%s"', reg);
            RETURN;
        END IF;
    END IF;
    IF octet_length(s) > 250 THEN
        why := 'the string supplied was too long to parse';
        RETURN;
    END IF;
    -- Narrowings (docs/sql-enqueue.md): other scripts' digits and
    -- punctuation, and RFC 3966 phone-context URIs, are for msgq send.
    IF octet_length(s) <> length(s) THEN
        why := 'use ASCII characters only (other scripts'' digits and punctuation are for msgq send)';
        RETURN;
    END IF;
    IF strpos(s, ';phone-context=') > 0 THEN
        why := 'a tel: URI with a phone-context is for msgq send';
        RETURN;
    END IF;
    SELECT * INTO dm FROM phone_metadata p WHERE p.region = reg AND reg <> '001';
    -- extractPossibleNumber: from the first + or digit; then the
    -- library's trailing-characters pattern (as Go's regexp reads it:
    -- "<char>&&<not #>]...", which plain numbers never end with) and a
    -- second number (/x...) cut off; then an ISDN subaddress.
    num := coalesce(substring(s FROM '[+0-9].*$'), '');
    i := regexp_instr(num, '[^\n]&&[^#]\]+$');
    IF i > 0 THEN
        num := left(num, i - 1);
    END IF;
    i := regexp_instr(num, '[\\/] *x');
    IF i > 0 THEN
        num := left(num, i - 1);
    END IF;
    i := strpos(num, ';isub=');
    IF i > 1 THEN
        num := left(num, i - 1);
    END IF;
    IF NOT phone_viable(num) THEN
        why := 'the phone number supplied is not a number';
        RETURN;
    END IF;
    -- maybeStripExtension: an extension (ext. 12, x12, #, ;ext=12, ...)
    -- after a viable number is dropped (E.164 has none).
    i := regexp_instr(num, '(?:' || phone_extension_re() || ')$', 1, 1, 0, 'i');
    IF i > 0 AND phone_viable(left(num, i - 1)) THEN
        num := left(num, i - 1);
    END IF;
    r := phone_extract_calling_code(num, dm);
    IF r.err = 'invalid country code' AND left(num, 1) = '+' THEN
        r := phone_extract_calling_code(ltrim(num, '+'), dm);
        IF r.err IS NULL AND r.cc = 0 THEN
            r.err := 'invalid country code';
        END IF;
    END IF;
    IF r.err IS NOT NULL THEN
        why := r.err;
        RETURN;
    END IF;
    cc := r.cc;
    nat := r.nat;
    IF cc <> 0 THEN
        SELECT * INTO m FROM phone_metadata p WHERE p.calling_code = cc AND p.main;
    ELSE
        nat := phone_normalize(num);
        IF dm.region IS NOT NULL THEN
            cc := dm.calling_code;
            m := dm;
        END IF;
    END IF;
    IF length(nat) < 2 THEN
        why := 'the string supplied is too short to be a phone number';
        RETURN;
    END IF;
    IF m.region IS NOT NULL THEN
        pot := phone_strip_national_prefix(nat, m);
        IF phone_length(pot, m.possible_lengths, m.local_only_lengths) NOT IN ('too_short', 'local_only', 'invalid_length') THEN
            nat := pot;
        END IF;
    END IF;
    IF length(nat) < 2 THEN
        why := 'the string supplied is too short to be a phone number';
        RETURN;
    END IF;
    IF length(nat) > 17 THEN
        why := 'the string supplied is too long to be a phone number';
        RETURN;
    END IF;
    -- IsPossibleNumberWithReason, by the calling code's main region.
    SELECT * INTO m FROM phone_metadata p WHERE p.calling_code = cc AND p.main;
    IF m.region IS NULL THEN
        why := 'unknown country code';
        RETURN;
    END IF;
    IF m.national_pattern = '' THEN
        st := 'possible';
    ELSE
        st := phone_length(nat, m.possible_lengths, m.local_only_lengths);
    END IF;
    CASE st
        WHEN 'possible' THEN e164 := '+' || cc || nat;
        WHEN 'too_short' THEN why := 'too short';
        WHEN 'too_long' THEN why := 'too long';
        ELSE why := 'not a possible number for its country';
    END CASE;
END $$;


-- SMS segments (internal/sms): `msgq migrate` records each identity's
-- max_segments, and enqueue() refuses a longer SMS text as msgq send does.
ALTER TABLE sql_identities ADD COLUMN max_segments integer NOT NULL DEFAULT 0 CHECK (max_segments >= 0);

-- sms_segments is internal/sms.Segments: the segments an SMS text is sent
-- in and its encoding. GSM-7 when every character is of the GSM 03.38
-- default alphabet (its extension table's characters two septets): 160
-- septets alone, 153 a segment; else UCS-2 (a character outside the BMP
-- two units): 70 alone, 67 a segment; a character never split.
CREATE FUNCTION sms_segments(t text, OUT segments integer, OUT encoding text) LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    basic  text := '@£$¥èéùìòÇ' || chr(10) || 'Øø' || chr(13) || 'ÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !"#¤%&''()*+,-./0123456789:;<=>?¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà';
    ext    text := chr(12) || '^{}\[~]|€';
    gsm    boolean;
    single integer := 160;
    per    integer := 153;
    sizes  integer[] := '{}';
    total  integer := 0;
    used   integer := 0;
    n      integer;
    c      text;
BEGIN
    encoding := 'GSM-7';
    segments := 0;
    IF coalesce(t, '') = '' THEN
        RETURN;
    END IF;
    gsm := translate(t, basic || ext, '') = '';
    IF NOT gsm THEN
        encoding := 'UCS-2';
        single := 70;
        per := 67;
    END IF;
    FOREACH c IN ARRAY string_to_array(t, NULL) LOOP
        IF gsm THEN
            n := CASE WHEN strpos(ext, c) > 0 THEN 2 ELSE 1 END;
        ELSE
            n := CASE WHEN ascii(c) > 65535 THEN 2 ELSE 1 END;
        END IF;
        sizes := sizes || n;
        total := total + n;
    END LOOP;
    segments := 1;
    IF total <= single THEN
        RETURN;
    END IF;
    FOREACH n IN ARRAY sizes LOOP
        IF used + n > per THEN
            segments := segments + 1;
            used := 0;
        END IF;
        used := used + n;
    END LOOP;
END $$;

-- enqueue is msgq send in the caller's transaction (docs/sql-enqueue.md):
-- it returns the message id, the existing one for a replay (same tenant
-- and key, same content: nothing written but the replay counter, or the
-- row revived if it was refused for an opt-out that has lifted); the same
-- key with other content raises MQ409 with the existing id as DETAIL; bad
-- input raises MQ422 naming the field, nothing written.
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
    expires_in      interval    DEFAULT NULL
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
    v_next := greatest(now_, coalesce(v_next, now_));

    -- store.Payload and store.EnqueueParams.BodyHash, byte for byte.
    v_payload := '{' || concat_ws(',',
        CASE WHEN v_tpl <> '' THEN '"template":' || go_json(v_tpl) END,
        CASE WHEN v_lang <> '' THEN '"lang":' || go_json(v_lang) END,
        CASE WHEN cardinality(v_par) > 0 THEN '"params":' || go_json_array(v_par) END,
        CASE WHEN v_txt <> '' THEN '"text":' || go_json(v_txt) END,
        CASE WHEN v_subj <> '' AND v_ch = 'email' THEN '"subject":' || go_json(v_subj) END,
        CASE WHEN v_fbt <> '' THEN '"fallback_template":' || go_json(v_fbt) END,
        CASE WHEN cardinality(v_fbp) > 0 THEN '"fallback_params":' || go_json_array(v_fbp) END) || '}';
    v_hash := encode(sha256(convert_to('{"to":' || go_json(v_to) || ',"channel":' || go_json(v_ch) ||
        ',"identity":' || go_json(v_id) || ',"payload":' || v_payload || '}', 'UTF8')), 'hex');

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
    FOREACH f IN ARRAY ARRAY['phone_extension_re()', 'phone_viable(text)', 'phone_normalize(text)',
        'phone_extract_calling_code(text,phone_metadata)', 'normalize_phone(text,text)', 'sms_segments(text)',
        'enqueue(text,text,text,text,text,text,text,text,text[],text,text,text,text[],text,text,text,timestamptz,interval,timestamptz,interval)'] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_catalog, pg_temp', f, current_schema());
    END LOOP;
END $$;
