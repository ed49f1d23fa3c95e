-- Enqueue inside the application's own transaction (docs/sql-enqueue.md):
-- enqueue(...) writes what the Go store's MessageEnqueue writes for a new
-- send (the messages row, its first history row, the NOTIFY delivered at
-- commit), with the CLI's validation, so the message exists if and only if
-- the caller's transaction commits.
--
-- Phone numbers are read as internal/phone reads them (nyaruka/phonenumbers'
-- Parse + IsPossibleNumberWithReason), from phone_metadata: the library's
-- own metadata, generated into phone_metadata.sql (TestPhoneMetadataIsCurrent
-- -update) and loaded by Migrate whenever it differs from
-- phone_metadata_version's (and is not older), so the table follows the library msgq is built
-- with without a migration per library release.
CREATE TABLE phone_metadata (
    region             text      NOT NULL, -- ISO 3166 code, or 001 for a non-geographic calling code
    calling_code       integer   NOT NULL,
    main               boolean   NOT NULL, -- the region the library reads this calling code's numbers by
    intl_prefix        text      NOT NULL, -- regular expression of the international (IDD) prefix
    national_prefix    text      NOT NULL, -- regular expression of the national prefix for parsing
    national_transform text      NOT NULL, -- its transform rule, in regexp_replace's \1 form
    national_pattern   text      NOT NULL, -- regular expression of a national significant number
    possible_lengths   integer[] NOT NULL,
    local_only_lengths integer[] NOT NULL,
    PRIMARY KEY (region, calling_code)
);
CREATE INDEX phone_metadata_main ON phone_metadata (calling_code) WHERE main;

-- Which build loaded phone_metadata: the library's version (a build
-- never replaces a newer release's metadata with its older one, so hosts
-- of two msgq versions during a rollout do not reload it in turns) and
-- the generated file's hash.
CREATE TABLE phone_metadata_version (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    library text    NOT NULL,
    hash    text    NOT NULL
);

-- The identities a configuration defines, and their channels (default
-- first): `msgq migrate` records its config's (docs/sql-enqueue.md). The
-- database does not know the config; the CLI refuses an identity it does
-- not define, and so does enqueue(), by this table.
CREATE TABLE sql_identities (
    name       text COLLATE "C" PRIMARY KEY,
    channels   text[]      NOT NULL,
    is_default boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL
);

-- mq_invalid raises bad input: SQLSTATE MQ422, the field in the message and
-- in the error's column name.
CREATE FUNCTION mq_invalid(field text, msg text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'MQ422', MESSAGE = 'msgq: ' || field || ' ' || msg, COLUMN = field,
        HINT = 'nothing was written; see docs/sql-enqueue.md';
END $$;

-- phone_length is the library's testNumberLength: possible, local_only,
-- too_short, too_long or invalid_length.
CREATE FUNCTION phone_length(nsn text, pl integer[], lo integer[]) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN pl[1] = -1 THEN 'invalid_length'
        WHEN length(nsn) = ANY (lo) THEN 'local_only'
        WHEN pl[1] = length(nsn) THEN 'possible'
        WHEN pl[1] > length(nsn) THEN 'too_short'
        WHEN pl[array_upper(pl, 1)] < length(nsn) THEN 'too_long'
        WHEN length(nsn) = ANY (pl) THEN 'possible'
        ELSE 'invalid_length' END
$$;

-- phone_strip_national_prefix is the library's
-- maybeStripNationalPrefixAndCarrierCode: num without its national prefix
-- (transformed where the region has a rule), or num as it was.
CREATE FUNCTION phone_strip_national_prefix(num text, m phone_metadata) RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
    g       text[];
    viable  boolean;
    full_re text := '^(?:' || m.national_pattern || ')$';
    out     text;
BEGIN
    IF num = '' OR m.national_prefix = '' THEN
        RETURN num;
    END IF;
    -- One group around the whole match: g[1] is the match, the rest the
    -- pattern's own groups (the last one decides the transform).
    g := regexp_match(num, '^((?:' || m.national_prefix || '))');
    IF g IS NULL THEN
        RETURN num;
    END IF;
    viable := num ~ full_re;
    IF m.national_transform = '' OR g[array_upper(g, 1)] IS NULL THEN
        out := substr(num, length(g[1]) + 1);
    ELSE
        out := regexp_replace(num, '^(?:' || m.national_prefix || ')', m.national_transform);
    END IF;
    IF viable AND NOT out ~ full_re THEN
        RETURN num;
    END IF;
    RETURN out;
END $$;

-- phone_extract_calling_code is the library's maybeExtractCountryCode on a
-- number that has been through extractPossibleNumber: the calling code
-- (0: none given) and the national number, or err.
CREATE FUNCTION phone_extract_calling_code(number text, dm phone_metadata, OUT cc integer, OUT nat text, OUT err text)
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
        full_num := regexp_replace(ltrim(number, '+'), '[^0-9]', '', 'g');
        from_dflt := false;
    ELSE
        full_num := regexp_replace(number, '[^0-9]', '', 'g');
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

-- normalize_phone is internal/phone.Normalize: raw as E.164 (+15551234567),
-- a local number read as one of region, or why it is refused. It takes
-- the number in digits, spaces and - ( ) . / [ ] * only: a number with
-- letters (a vanity number, an extension) is refused, where the CLI would
-- read it (docs/sql-enqueue.md).
CREATE FUNCTION normalize_phone(raw text, region text, OUT e164 text, OUT why text) LANGUAGE plpgsql STABLE AS $$
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
    IF s ~ '[^0-9 +().\-/\[\]*]' THEN
        why := 'use digits, spaces and - ( ) . / only (letters and extensions are for msgq send)';
        RETURN;
    END IF;
    SELECT * INTO dm FROM phone_metadata p WHERE p.region = reg AND reg <> '001';
    -- extractPossibleNumber: from the first + or digit, without trailing
    -- punctuation; then isViablePhoneNumber.
    num := substring(s FROM '[+0-9].*$');
    num := coalesce(regexp_replace(num, '[^0-9]+$', ''), '');
    IF NOT (num ~ '^[0-9]{2}$' OR (num ~ '^\+*[^+]*$' AND length(regexp_replace(num, '[^0-9]', '', 'g')) >= 3)) THEN
        why := 'the phone number supplied is not a number';
        RETURN;
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
        nat := regexp_replace(num, '[^0-9]', '', 'g');
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

-- normalize_email is internal/recipient's email path for the addresses
-- SQL can read exactly: a bare dot-atom address with an ASCII host name,
-- its domain put in lower case. Anything else (a display name, a quoted
-- local part, a non-ASCII domain) is refused (docs/sql-enqueue.md).
CREATE FUNCTION normalize_email(raw text, OUT addr text, OUT why text) LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    ws     text := E' \t\n\x0b\f\r\u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000';
    s      text := btrim(coalesce(raw, ''), ws);
    atom   text := '[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+';
    label  text := '[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?';
    local  text;
    domain text;
BEGIN
    IF s = '' THEN
        why := 'empty';
        RETURN;
    END IF;
    IF s ~ '[\r\n]' THEN
        why := 'contains a line break';
        RETURN;
    END IF;
    IF NOT s ~ ('^' || atom || '(\.' || atom || ')*@(' || label || '\.)+' || label || '$') THEN
        why := 'must be a bare address like ada@example.com (display names, quoted local parts and non-ASCII domains go through msgq send)';
        RETURN;
    END IF;
    local := split_part(s, '@', 1);
    domain := lower(split_part(s, '@', 2));
    -- An A-label (xn--) is IDNA's to check: refused here rather than
    -- passed unchecked.
    IF domain ~ '(^|\.)..--' OR octet_length(domain) > 253 THEN
        why := 'the domain must be a plain host name like example.com (IDNA domains go through msgq send)';
        RETURN;
    END IF;
    addr := local || '@' || domain;
END $$;

-- go_json is Go's encoding/json encoding of a string: the body hash and
-- the payload are Go's bytes, so a send through enqueue() and the same
-- send through msgq send are replays of each other.
CREATE FUNCTION go_json(s text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    out text := replace(replace(s, '\', '\\'), '"', '\"');
BEGIN
    out := replace(replace(replace(out, E'\n', '\n'), E'\r', '\r'), E'\t', '\t');
    out := replace(replace(out, E'\b', '\b'), E'\f', '\f');
    FOR c IN 1..31 LOOP
        IF c NOT IN (8, 9, 10, 12, 13) THEN
            out := replace(out, chr(c), '\u00' || lpad(to_hex(c), 2, '0'));
        END IF;
    END LOOP;
    out := replace(replace(replace(out, '<', '\u003c'), '>', '\u003e'), '&', '\u0026');
    out := replace(replace(out, U&'\2028', '\u2028'), U&'\2029', '\u2029');
    RETURN '"' || out || '"';
END $$;

CREATE FUNCTION go_json_array(a text[]) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT '[' || coalesce((SELECT string_agg(go_json(coalesce(v, '')), ',' ORDER BY o) FROM unnest(a) WITH ORDINALITY AS u(v, o)), '') || ']'
$$;

-- new_ulid is a ULID at t (store.IDs: 48 bits of milliseconds, 80 random
-- bits, Crockford's base32), so that ids sort by creation with the Go
-- store's.
CREATE FUNCTION new_ulid(t timestamptz) RETURNS text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    alphabet text := '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
    r1       bytea := uuid_send(gen_random_uuid());
    -- A v4 UUID's bytes 6 and 8 carry its version and variant: only the
    -- fully random bytes are taken.
    b        bytea := substr(int8send((extract(epoch FROM t) * 1000)::bigint), 3, 6) || substr(r1, 1, 6) || substr(r1, 11, 4);
    bits     bit varying := B'00' || ('x' || encode(b, 'hex'))::bit(128);
    out      text := '';
BEGIN
    FOR i IN 0..25 LOOP
        out := out || substr(alphabet, substring(bits FROM i * 5 + 1 FOR 5)::bit(5)::integer + 1, 1);
    END LOOP;
    RETURN out;
END $$;

-- enqueue is msgq send in the caller's transaction (docs/sql-enqueue.md):
-- it returns the message id, the existing one for a replay (same tenant
-- and key, same content: nothing written but the replay counter); the same
-- key with other content raises MQ409 with the existing id as DETAIL; bad
-- input raises MQ422 naming the field, nothing written.
CREATE FUNCTION enqueue(
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

    SELECT m.id, m.body_hash INTO v_old FROM messages m WHERE m.tenant = v_ten AND m.key = v_key;
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
    -- A replay: what the Go store counts (rules.RefusedCounts).
    v_min := floor(extract(epoch FROM now_) / 60)::bigint * 60;
    INSERT INTO counters (name, n) VALUES ('key_replays', 1) ON CONFLICT (name) DO UPDATE SET n = counters.n + 1;
    INSERT INTO counts_by_minute (name, minute, n) VALUES ('key_replays', v_min, 1)
        ON CONFLICT (name, minute) DO UPDATE SET n = counts_by_minute.n + 1;
    DELETE FROM counts_by_minute WHERE name = 'key_replays' AND minute < v_min - 8 * 24 * 3600;
    RETURN v_old.id;
END $$;

-- Every function reads the tables of the schema it was created in,
-- whatever the caller's search_path (pg_temp last: a caller's temporary
-- table cannot stand in for msgq's).
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['mq_invalid(text,text)', 'phone_length(text,integer[],integer[])',
        'phone_strip_national_prefix(text,phone_metadata)', 'phone_extract_calling_code(text,phone_metadata)',
        'normalize_phone(text,text)', 'normalize_email(text)', 'go_json(text)', 'go_json_array(text[])',
        'new_ulid(timestamptz)',
        'enqueue(text,text,text,text,text,text,text,text,text[],text,text,text,text[],text,text,text,timestamptz,interval,timestamptz,interval)'] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_catalog, pg_temp', f, current_schema());
    END LOOP;
END $$;
