-- The SQL intake (docs/sql-enqueue.md). Until now enqueue() was msgq send
-- written again in PL/pgSQL (0017-0020, about 2,300 lines, with the phone
-- library's metadata loaded into tables and the config's identities copied
-- into sql_identities) so that it could validate and normalise a send
-- inside the caller's transaction. Now it keeps only what must be answered
-- synchronously there: the key's uniqueness, replay (the existing id) and
-- conflict (MQ409), and cheap exact checks (the key's grammar, the
-- required fields, a known identity name). It writes the row in state
-- intake with the caller's input as given; the one Go admission
-- (internal/queue, run by the drain, drain --follow and msgq serve, woken
-- by the NOTIFY at commit) queues it, or fails it as invalid naming the
-- field.
--
-- This migration runs the same on a schema that ran the released 0017-0020
-- and on one that did not (they are empty now): every object they made is
-- dropped if it is there, and upgrade_test.go checks that both end in the
-- same schema.

DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace
          AND p.proname = ANY (ARRAY['enqueue', 'go_json', 'go_json_array', 'go_quote', 'mq_invalid', 'new_ulid',
              'normalize_email', 'normalize_phone', 'phone_extension_re', 'phone_extract_calling_code',
              'phone_extract_possible', 'phone_length', 'phone_map', 'phone_normalize', 'phone_re',
              'phone_strip_national_prefix', 'phone_viable', 'quiet_clock', 'quiet_ends', 'quiet_in',
              'quiet_number_zone', 'quiet_offset', 'quiet_parse', 'quiet_window_text', 'sms_segments'])
    LOOP
        EXECUTE 'DROP FUNCTION ' || f::text;
    END LOOP;
END $$;
DROP TABLE IF EXISTS phone_metadata, phone_metadata_version, phone_timezones;

-- The identity names enqueue() accepts, and the default one: `msgq migrate`
-- records its config's. Names only: what an identity sends on and its
-- limits are the config's, which the admission reads.
CREATE TABLE IF NOT EXISTS sql_identities (
    name       text COLLATE "C" PRIMARY KEY,
    is_default boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL
);
ALTER TABLE sql_identities DROP COLUMN IF EXISTS channels, DROP COLUMN IF EXISTS max_segments,
    DROP COLUMN IF EXISTS quiet_window, DROP COLUMN IF EXISTS quiet_zone,
    DROP COLUMN IF EXISTS quiet_exempt_lanes, DROP COLUMN IF EXISTS quiet_exempt_purposes;

-- intake_digest is the digest of the content enqueue() took a row in with
-- (NULL for every other row): a later call with the same content is a
-- replay of it, before and after the admission, whose body_hash is Go's.
ALTER TABLE messages ADD COLUMN intake_digest text;
-- What the admission reads: the rows waiting for it, oldest first.
CREATE INDEX messages_intake ON messages (id) WHERE state = 'intake';

-- mq_invalid raises bad input: SQLSTATE MQ422, the field in the message and
-- in the error's column name.
CREATE FUNCTION mq_invalid(field text, msg text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'MQ422', MESSAGE = 'msgq: ' || field || ' ' || msg, COLUMN = field,
        HINT = 'nothing was written; see docs/sql-enqueue.md';
END $$;

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

-- enqueue takes a send in, in the caller's transaction. The signature is
-- the released one's (0019), parameter for parameter, so calls written
-- for it work unchanged.
CREATE FUNCTION enqueue(
    key               text,
    to_addr           text,
    identity          text        DEFAULT NULL,
    channel           text        DEFAULT NULL,
    tenant            text        DEFAULT NULL,
    region            text        DEFAULT NULL,
    template          text        DEFAULT NULL,
    lang              text        DEFAULT NULL,
    params            text[]      DEFAULT NULL,
    text              text        DEFAULT NULL,
    subject           text        DEFAULT NULL,
    fallback_template text        DEFAULT NULL,
    fallback_params   text[]      DEFAULT NULL,
    purpose           text        DEFAULT NULL,
    ref               text        DEFAULT NULL,
    lane              text        DEFAULT NULL,
    not_before        timestamptz DEFAULT NULL,
    not_before_in     interval    DEFAULT NULL,
    expires_at        timestamptz DEFAULT NULL,
    expires_in        interval    DEFAULT NULL,
    quiet_hours       text        DEFAULT NULL
) RETURNS text LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    now_      timestamptz := clock_timestamp();
    v_key     text := coalesce(enqueue.key, '');
    v_ten     text := coalesce(nullif(enqueue.tenant, ''), 'default');
    v_id      text := nullif(enqueue.identity, '');
    v_tpl     text := nullif(enqueue.template, '');
    v_txt     text := nullif(enqueue.text, '');
    v_lane    text := coalesce(nullif(enqueue.lane, ''), 'bulk');
    v_next    timestamptz;
    v_exp     timestamptz;
    v_content jsonb;
    v_input   jsonb;
    v_digest  text;
    v_new     text;
    v_old     record;
    v_same    boolean;
    v_min     bigint;
BEGIN
    -- The cheap exact checks, in the order msgq send makes them.
    IF v_key = '' THEN
        PERFORM mq_invalid('key', 'is required');
    END IF;
    IF NOT v_key ~ '^[A-Za-z0-9._:-]{1,64}$' THEN
        PERFORM mq_invalid('key', format('"%s" must be 1 to 64 characters of A-Za-z0-9._:-', left(v_key, 70)));
    END IF;
    IF coalesce(enqueue.to_addr, '') = '' THEN
        PERFORM mq_invalid('to', 'is required');
    END IF;
    IF v_id IS NULL THEN
        SELECT name INTO v_id FROM sql_identities WHERE is_default;
        IF v_id IS NULL THEN
            PERFORM mq_invalid('identity', 'is required (no default identity recorded: run msgq migrate with the config)');
        END IF;
    ELSIF NOT EXISTS (SELECT 1 FROM sql_identities WHERE name = v_id) THEN
        PERFORM mq_invalid('identity', format('%s is not an identity of the config msgq migrate recorded (%s)', v_id,
            coalesce((SELECT string_agg(name, ', ' ORDER BY name) FROM sql_identities), 'none')));
    END IF;
    IF v_txt IS NOT NULL AND v_tpl IS NOT NULL THEN
        PERFORM mq_invalid('text', 'cannot be combined with a template: send one or the other');
    ELSIF v_txt IS NULL AND v_tpl IS NULL THEN
        PERFORM mq_invalid('payload', 'needs a template or text');
    END IF;
    -- A NULL element is read as an empty parameter by the admission, so
    -- it is one here too (or a replay would differ from its own call); an
    -- array of arrays is no list of parameters.
    IF array_ndims(enqueue.params) > 1 THEN
        PERFORM mq_invalid('params', 'must be a one-dimensional array of text');
    END IF;
    IF array_ndims(enqueue.fallback_params) > 1 THEN
        PERFORM mq_invalid('fallback_params', 'must be a one-dimensional array of text');
    END IF;
    IF NOT v_ten ~ '^[A-Za-z0-9._:-]{1,64}$' THEN
        PERFORM mq_invalid('tenant', 'must be 1 to 64 characters of A-Za-z0-9._:-');
    END IF;
    IF v_lane NOT IN ('reply', 'bulk') THEN
        PERFORM mq_invalid('lane', format('must be reply or bulk (got "%s")', left(v_lane, 70)));
    END IF;
    -- Delays are exact durations on this server's clock, which every
    -- drain shares; the admission reads the absolute times.
    IF enqueue.not_before IS NOT NULL AND enqueue.not_before_in IS NOT NULL THEN
        PERFORM mq_invalid('not_before', 'give not_before or not_before_in, not both');
    END IF;
    IF enqueue.expires_at IS NOT NULL AND enqueue.expires_in IS NOT NULL THEN
        PERFORM mq_invalid('expires_in', 'give expires_in or expires_at, not both');
    END IF;
    v_next := coalesce(enqueue.not_before, now_ + make_interval(secs => extract(epoch FROM enqueue.not_before_in)));
    IF enqueue.expires_in IS NOT NULL AND extract(epoch FROM enqueue.expires_in) <= 0 THEN
        PERFORM mq_invalid('expires_in', format('%s puts the expiry in the past', enqueue.expires_in));
    END IF;
    v_exp := coalesce(enqueue.expires_at, now_ + make_interval(secs => extract(epoch FROM enqueue.expires_in)));
    -- A time the admission could not read back (infinity, beyond year
    -- 9999) would be dropped or refused there, far from the caller.
    IF v_next IS NOT NULL AND NOT (isfinite(v_next) AND extract(year FROM v_next AT TIME ZONE 'UTC') BETWEEN 1 AND 9999) THEN
        PERFORM mq_invalid('not_before', format('%s is not a time between the years 1 and 9999', v_next));
    END IF;
    IF v_exp IS NOT NULL AND NOT (isfinite(v_exp) AND extract(year FROM v_exp AT TIME ZONE 'UTC') BETWEEN 1 AND 9999) THEN
        PERFORM mq_invalid('expires_at', format('%s is not a time between the years 1 and 9999', v_exp));
    END IF;
    IF v_exp IS NOT NULL AND v_exp <= now_ THEN
        PERFORM mq_invalid('expires_at', format('is in the past (%s)', to_char(v_exp AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')));
    END IF;
    IF v_exp IS NOT NULL AND v_next IS NOT NULL AND v_exp <= v_next THEN
        PERFORM mq_invalid('expires_at', 'is not after not_before: the message could never go out');
    END IF;

    -- The content as given (what a replay must repeat: not purpose, ref,
    -- lane, timing or quiet hours, as for msgq send), and the whole input
    -- the admission reads (field names are queue.Spec's).
    v_content := jsonb_strip_nulls(jsonb_build_object(
        'to', enqueue.to_addr, 'region', nullif(enqueue.region, ''), 'identity', v_id,
        'channel', nullif(enqueue.channel, ''), 'template', v_tpl,
        'lang', CASE WHEN v_tpl IS NOT NULL THEN coalesce(nullif(enqueue.lang, ''), 'en') ELSE nullif(enqueue.lang, '') END,
        'params', CASE WHEN cardinality(enqueue.params) > 0 THEN to_jsonb(array_replace(enqueue.params, NULL, '')) END,
        'text', v_txt, 'subject', nullif(enqueue.subject, ''),
        'fallback_template', nullif(enqueue.fallback_template, ''),
        'fallback_params', CASE WHEN cardinality(enqueue.fallback_params) > 0 THEN to_jsonb(array_replace(enqueue.fallback_params, NULL, '')) END));
    v_digest := encode(sha256(convert_to(v_content::text, 'UTF8')), 'hex');
    v_input := v_content || jsonb_strip_nulls(jsonb_build_object(
        'purpose', nullif(enqueue.purpose, ''), 'ref', nullif(enqueue.ref, ''), 'lane', v_lane,
        'quiet_hours', nullif(enqueue.quiet_hours, ''),
        'not_before', to_char(v_next AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        'expires_at', to_char(v_exp AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')));

    -- state.Transition(None, TakeIn): intake, source sql (store.SourceSQL).
    -- body_hash is not Go's until the admission: a msgq send of the key
    -- meanwhile is a conflict, never a replay of content not yet checked.
    v_new := new_ulid(now_);
    INSERT INTO messages (id, tenant, key, body_hash, recipient, channel, identity, purpose, trigger_ref, lane,
        payload, state, next_attempt_at, expires_at, resend_of, created_at, updated_at, intake_digest)
    VALUES (v_new, v_ten, v_key, 'intake:' || v_digest, enqueue.to_addr, coalesce(enqueue.channel, ''), v_id,
        coalesce(enqueue.purpose, ''), coalesce(enqueue.ref, ''), v_lane, v_input::text, 'intake',
        greatest(now_, coalesce(v_next, now_)), v_exp, '', now_, now_, v_digest)
    ON CONFLICT (tenant, key) DO NOTHING;
    IF FOUND THEN
        INSERT INTO history (message_id, seq, from_state, to_state, reason, event, applied, source, detail, at)
        VALUES (v_new, 1, '', 'intake', '', 'take_in', true, 'sql', '', now_);
        PERFORM pg_notify('msgq_enqueued', current_schema());
        RETURN v_new;
    END IF;

    SELECT m.id, m.intake_digest, m.recipient, m.channel, m.identity, m.payload INTO v_old
        FROM messages m WHERE m.tenant = v_ten AND m.key = v_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '40001', MESSAGE = format('msgq: key %s of tenant %s was taken concurrently; retry the transaction', v_key, v_ten);
    END IF;
    IF v_old.intake_digest IS NOT NULL THEN
        v_same := v_old.intake_digest = v_digest;
    ELSE
        -- A row written otherwise (msgq send, the HTTP API, or enqueue()
        -- before this migration) holds its content checked and
        -- normalised: the call is a replay of it when it gives that
        -- content as stored (the number in E.164, the address as
        -- msgq send writes it), as the released function answered.
        v_same := v_old.payload IS NOT NULL AND v_old.recipient = enqueue.to_addr AND v_old.identity = v_id
            AND (nullif(enqueue.channel, '') IS NULL OR v_old.channel = enqueue.channel)
            AND (v_old.payload::jsonb - 'quiet_hours') = (v_content - 'to' - 'region' - 'identity' - 'channel');
    END IF;
    IF NOT v_same THEN
        RAISE EXCEPTION USING ERRCODE = 'MQ409', COLUMN = 'key',
            MESSAGE = format('msgq: key %s of tenant %s is taken by message %s with other content', v_key, v_ten, v_old.id),
            DETAIL = v_old.id,
            HINT = 'the existing message''s id is this error''s DETAIL; nothing was written';
    END IF;
    v_min := floor(extract(epoch FROM now_) / 60)::bigint * 60;
    INSERT INTO counters (name, n) VALUES ('key_replays', 1) ON CONFLICT (name) DO UPDATE SET n = counters.n + 1;
    INSERT INTO counts_by_minute (name, minute, n) VALUES ('key_replays', v_min, 1)
        ON CONFLICT (name, minute) DO UPDATE SET n = counts_by_minute.n + 1;
    DELETE FROM counts_by_minute WHERE name = 'key_replays' AND minute < v_min - 8 * 24 * 3600;
    RETURN v_old.id;
END $$;

-- The functions read this schema's tables whatever the caller's
-- search_path. enqueue() runs as its owner (msgq's own role): what it
-- writes is msgq's business (the message, its history, the counts and
-- status events its triggers keep), so the application's role needs only
-- USAGE on the schema and EXECUTE on the function, not the tables. Every
-- role has EXECUTE unless it is revoked from PUBLIC (docs/sql-enqueue.md).
ALTER FUNCTION enqueue(text,text,text,text,text,text,text,text,text[],text,text,text,text[],text,text,text,timestamptz,interval,timestamptz,interval,text) SECURITY DEFINER;
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['mq_invalid(text,text)', 'new_ulid(timestamptz)',
        'enqueue(text,text,text,text,text,text,text,text,text[],text,text,text,text[],text,text,text,timestamptz,interval,timestamptz,interval,text)'] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_catalog, pg_temp', f, current_schema());
    END LOOP;
END $$;
