-- A store made by msgq at commit c946b42, whose PostgreSQL migrations were
-- numbered 1-10 (before the shared numbering of docs/operations.md):
--   msgq migrate; msgq send k1, k2; msgq drain (sim sends both); msgq send k3 --not-before 1h
-- on search_path=msgq_old, then pg_dump --inserts --no-owner --no-privileges
-- --no-comments -n msgq_old, with psql meta-commands, session SETs and
-- CREATE SCHEMA removed. The test replaces msgq_old with its own schema.

CREATE TABLE msgq_old.attempts (
    seq bigint NOT NULL,
    message_id text NOT NULL COLLATE pg_catalog."C",
    number integer NOT NULL,
    started_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone NOT NULL,
    class text NOT NULL,
    http_status integer DEFAULT 0 NOT NULL,
    provider_code text DEFAULT ''::text NOT NULL,
    provider_subcode text DEFAULT ''::text NOT NULL,
    raw_error text DEFAULT ''::text NOT NULL,
    latency_us bigint DEFAULT 0 NOT NULL
);

ALTER TABLE msgq_old.attempts ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME msgq_old.attempts_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE msgq_old.clock_offsets (
    process text NOT NULL,
    host text NOT NULL,
    role text NOT NULL,
    offset_us bigint NOT NULL,
    rtt_us bigint NOT NULL,
    measured_at timestamp with time zone NOT NULL
);

CREATE TABLE msgq_old.counters (
    name text NOT NULL,
    n bigint NOT NULL
);

CREATE TABLE msgq_old.counts_by_minute (
    name text NOT NULL,
    minute bigint NOT NULL,
    n bigint NOT NULL
);

CREATE TABLE msgq_old.evidence (
    id text NOT NULL COLLATE pg_catalog."C",
    event_id text NOT NULL COLLATE pg_catalog."C",
    provider text NOT NULL,
    identity text DEFAULT ''::text NOT NULL,
    dedupe_key text NOT NULL,
    provider_id text DEFAULT ''::text NOT NULL,
    status text NOT NULL,
    at timestamp with time zone NOT NULL,
    callback_ref text DEFAULT ''::text NOT NULL,
    error_code text DEFAULT ''::text NOT NULL,
    error text DEFAULT ''::text NOT NULL,
    message_id text DEFAULT ''::text NOT NULL COLLATE pg_catalog."C",
    outcome text DEFAULT ''::text NOT NULL,
    received_at timestamp with time zone NOT NULL,
    applied_at timestamp with time zone,
    recipient text DEFAULT ''::text NOT NULL,
    suspect text DEFAULT ''::text NOT NULL
);

CREATE TABLE msgq_old.history (
    message_id text NOT NULL COLLATE pg_catalog."C",
    seq integer NOT NULL,
    from_state text NOT NULL,
    to_state text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    event text NOT NULL,
    applied boolean NOT NULL,
    source text NOT NULL,
    detail text DEFAULT ''::text NOT NULL,
    at timestamp with time zone NOT NULL
);

CREATE TABLE msgq_old.identities (
    name text NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    paused_reason text DEFAULT ''::text NOT NULL,
    paused_at timestamp with time zone,
    updated_at timestamp with time zone NOT NULL
);

CREATE TABLE msgq_old.identity_pace (
    identity text NOT NULL,
    next_at timestamp with time zone NOT NULL
);

CREATE TABLE msgq_old.inbound (
    id text NOT NULL COLLATE pg_catalog."C",
    event_id text NOT NULL COLLATE pg_catalog."C",
    provider text NOT NULL,
    identity text DEFAULT ''::text NOT NULL,
    provider_message_id text NOT NULL,
    sender text DEFAULT ''::text NOT NULL,
    type text DEFAULT ''::text NOT NULL,
    text text DEFAULT ''::text NOT NULL,
    reply_id text DEFAULT ''::text NOT NULL,
    reply_title text DEFAULT ''::text NOT NULL,
    context_id text DEFAULT ''::text NOT NULL,
    message_id text COLLATE pg_catalog."C",
    received_at timestamp with time zone NOT NULL,
    stored_at timestamp with time zone NOT NULL
);

CREATE TABLE msgq_old.messages (
    id text NOT NULL COLLATE pg_catalog."C",
    tenant text NOT NULL COLLATE pg_catalog."C",
    key text NOT NULL COLLATE pg_catalog."C",
    body_hash text NOT NULL,
    recipient text NOT NULL,
    channel text NOT NULL,
    identity text NOT NULL,
    purpose text DEFAULT ''::text NOT NULL,
    trigger_ref text DEFAULT ''::text NOT NULL,
    lane text NOT NULL,
    payload text,
    state text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone NOT NULL,
    expires_at timestamp with time zone,
    lease_owner text DEFAULT ''::text NOT NULL,
    lease_until timestamp with time zone,
    provider_id text DEFAULT ''::text NOT NULL,
    last_error text DEFAULT ''::text NOT NULL,
    resend_of text DEFAULT ''::text NOT NULL,
    resolution text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    maybe_sent boolean DEFAULT false NOT NULL,
    provider_id_collision text DEFAULT ''::text NOT NULL
);

CREATE TABLE msgq_old.notices (
    id text NOT NULL,
    event_id text NOT NULL,
    provider text NOT NULL,
    identity text DEFAULT ''::text NOT NULL,
    kind text NOT NULL,
    field text DEFAULT ''::text NOT NULL,
    code text DEFAULT ''::text NOT NULL,
    subject text DEFAULT ''::text NOT NULL,
    lang text DEFAULT ''::text NOT NULL,
    value text DEFAULT ''::text NOT NULL,
    detail text DEFAULT ''::text NOT NULL,
    dedupe_key text NOT NULL,
    at timestamp with time zone,
    received_at timestamp with time zone NOT NULL
);

CREATE TABLE msgq_old.recipient_pace (
    identity text NOT NULL,
    recipient text NOT NULL,
    next_at timestamp with time zone NOT NULL
);

CREATE TABLE msgq_old.schema_migrations (
    version integer NOT NULL,
    applied_at timestamp with time zone NOT NULL
);

CREATE TABLE msgq_old.service_windows (
    identity text NOT NULL,
    recipient text NOT NULL,
    last_inbound_at timestamp with time zone NOT NULL
);

CREATE TABLE msgq_old.template_holds (
    identity text NOT NULL,
    template text NOT NULL,
    lang text NOT NULL,
    status text NOT NULL,
    since timestamp with time zone NOT NULL,
    notice_id text NOT NULL
);

CREATE TABLE msgq_old.webhook_events (
    id text NOT NULL COLLATE pg_catalog."C",
    provider text NOT NULL,
    identity text DEFAULT ''::text NOT NULL,
    headers text DEFAULT '{}'::text NOT NULL,
    body bytea NOT NULL,
    received_at timestamp with time zone NOT NULL,
    processed_at timestamp with time zone,
    error text DEFAULT ''::text NOT NULL
);

INSERT INTO msgq_old.attempts OVERRIDING SYSTEM VALUE VALUES (1, '01M8V537FG8MNXH7YP0SHZ7PG1', 1, '2026-12-02 10:34:08.307836+00', '2026-12-02 10:34:08.30785+00', 'accepted', 202, '', '', '', 14);
INSERT INTO msgq_old.attempts OVERRIDING SYSTEM VALUE VALUES (2, '01M8V537GFF88WXHAXPC54P4XK', 1, '2026-12-02 10:34:08.316019+00', '2026-12-02 10:34:08.316028+00', 'accepted', 202, '', '', '', 8);

INSERT INTO msgq_old.clock_offsets VALUES ('vm:11093:733e3941', 'vm', 'drain', 0, 142, '2026-12-02 10:34:08.300382+00');

INSERT INTO msgq_old.history VALUES ('01M8V537FG8MNXH7YP0SHZ7PG1', 1, '', 'queued', '', 'enqueue', true, 'send', '', '2026-12-02 10:34:08.24017+00');
INSERT INTO msgq_old.history VALUES ('01M8V537GFF88WXHAXPC54P4XK', 1, '', 'queued', '', 'enqueue', true, 'send', '', '2026-12-02 10:34:08.271987+00');
INSERT INTO msgq_old.history VALUES ('01M8V537FG8MNXH7YP0SHZ7PG1', 2, 'queued', 'sending', '', 'claim', true, 'drain', 'lease vm:11093:733e3941', '2026-12-02 10:34:08.301902+00');
INSERT INTO msgq_old.history VALUES ('01M8V537GFF88WXHAXPC54P4XK', 2, 'queued', 'sending', '', 'claim', true, 'drain', 'lease vm:11093:733e3941', '2026-12-02 10:34:08.301902+00');
INSERT INTO msgq_old.history VALUES ('01M8V537FG8MNXH7YP0SHZ7PG1', 3, 'sending', 'sent', '', 'accept', true, 'drain', 'accepted', '2026-12-02 10:34:08.316275+00');
INSERT INTO msgq_old.history VALUES ('01M8V537GFF88WXHAXPC54P4XK', 3, 'sending', 'sent', '', 'accept', true, 'drain', 'accepted', '2026-12-02 10:34:08.323415+00');
INSERT INTO msgq_old.history VALUES ('01M8V537K312QJ0AXE9YF54MEW', 1, '', 'queued', '', 'enqueue', true, 'send', '', '2026-12-02 10:34:08.35523+00');

INSERT INTO msgq_old.messages VALUES ('01M8V537FG8MNXH7YP0SHZ7PG1', 'default', 'k1', '84f38cb052816fbbe5ba875b464f93bab8602d816de3b9c69bf59ec57fdfc863', '+15551234567', 'whatsapp', 'sim', '', '', 'bulk', '{"text":"hello"}', 'sent', '', 1, '2026-12-02 10:34:08.24017+00', NULL, '', NULL, 'msg_1', '', '', '', '2026-12-02 10:34:08.24017+00', '2026-12-02 10:34:08.316275+00', false, '');
INSERT INTO msgq_old.messages VALUES ('01M8V537GFF88WXHAXPC54P4XK', 'default', 'k2', '91fa9f32d73ff78632baaaa946a7d56b1845c10f774f1218329a2e7013eb2680', '+15551234568', 'whatsapp', 'sim', '', '', 'bulk', '{"template":"order_update","lang":"en","params":["Ada"]}', 'sent', '', 1, '2026-12-02 10:34:08.271987+00', NULL, '', NULL, 'msg_2', '', '', '', '2026-12-02 10:34:08.271987+00', '2026-12-02 10:34:08.323415+00', false, '');
INSERT INTO msgq_old.messages VALUES ('01M8V537K312QJ0AXE9YF54MEW', 'default', 'k3', 'f4b6ab7d2935037c2b0a42c88916a5b952ee6290ceb237d8b5a148fdc8d04b87', '+15551234569', 'whatsapp', 'sim', '', '', 'bulk', '{"text":"later"}', 'queued', '', 0, '2026-12-02 11:34:08.35523+00', NULL, '', NULL, '', '', '', '', '2026-12-02 10:34:08.35523+00', '2026-12-02 10:34:08.35523+00', false, '');

INSERT INTO msgq_old.schema_migrations VALUES (1, '2026-12-02 10:34:08.162915+00');
INSERT INTO msgq_old.schema_migrations VALUES (2, '2026-12-02 10:34:08.166247+00');
INSERT INTO msgq_old.schema_migrations VALUES (3, '2026-12-02 10:34:08.168631+00');
INSERT INTO msgq_old.schema_migrations VALUES (4, '2026-12-02 10:34:08.169758+00');
INSERT INTO msgq_old.schema_migrations VALUES (5, '2026-12-02 10:34:08.182511+00');
INSERT INTO msgq_old.schema_migrations VALUES (6, '2026-12-02 10:34:08.185503+00');
INSERT INTO msgq_old.schema_migrations VALUES (7, '2026-12-02 10:34:08.192378+00');
INSERT INTO msgq_old.schema_migrations VALUES (8, '2026-12-02 10:34:08.200494+00');
INSERT INTO msgq_old.schema_migrations VALUES (9, '2026-12-02 10:34:08.203666+00');
INSERT INTO msgq_old.schema_migrations VALUES (10, '2026-12-02 10:34:08.20881+00');

SELECT pg_catalog.setval('msgq_old.attempts_seq_seq', 2, true);

ALTER TABLE ONLY msgq_old.attempts
    ADD CONSTRAINT attempts_pkey PRIMARY KEY (seq);

ALTER TABLE ONLY msgq_old.clock_offsets
    ADD CONSTRAINT clock_offsets_pkey PRIMARY KEY (process);

ALTER TABLE ONLY msgq_old.counters
    ADD CONSTRAINT counters_pkey PRIMARY KEY (name);

ALTER TABLE ONLY msgq_old.counts_by_minute
    ADD CONSTRAINT counts_by_minute_pkey PRIMARY KEY (name, minute);

ALTER TABLE ONLY msgq_old.evidence
    ADD CONSTRAINT evidence_pkey PRIMARY KEY (id);

ALTER TABLE ONLY msgq_old.history
    ADD CONSTRAINT history_pkey PRIMARY KEY (message_id, seq);

ALTER TABLE ONLY msgq_old.identities
    ADD CONSTRAINT identities_pkey PRIMARY KEY (name);

ALTER TABLE ONLY msgq_old.identity_pace
    ADD CONSTRAINT identity_pace_pkey PRIMARY KEY (identity);

ALTER TABLE ONLY msgq_old.inbound
    ADD CONSTRAINT inbound_pkey PRIMARY KEY (id);

ALTER TABLE ONLY msgq_old.messages
    ADD CONSTRAINT messages_pkey PRIMARY KEY (id);

ALTER TABLE ONLY msgq_old.notices
    ADD CONSTRAINT notices_pkey PRIMARY KEY (id);

ALTER TABLE ONLY msgq_old.recipient_pace
    ADD CONSTRAINT recipient_pace_pkey PRIMARY KEY (identity, recipient);

ALTER TABLE ONLY msgq_old.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY msgq_old.service_windows
    ADD CONSTRAINT service_windows_pkey PRIMARY KEY (identity, recipient);

ALTER TABLE ONLY msgq_old.template_holds
    ADD CONSTRAINT template_holds_pkey PRIMARY KEY (identity, template, lang);

ALTER TABLE ONLY msgq_old.webhook_events
    ADD CONSTRAINT webhook_events_pkey PRIMARY KEY (id);

CREATE INDEX attempts_finished ON msgq_old.attempts USING btree (finished_at);

CREATE INDEX attempts_message ON msgq_old.attempts USING btree (message_id, seq);

CREATE INDEX clock_offsets_measured ON msgq_old.clock_offsets USING btree (measured_at);

CREATE UNIQUE INDEX evidence_dedupe ON msgq_old.evidence USING btree (provider, identity, dedupe_key);

CREATE INDEX evidence_message ON msgq_old.evidence USING btree (message_id, at, id);

CREATE INDEX evidence_pending ON msgq_old.evidence USING btree (at, id) WHERE (outcome = ''::text);

CREATE INDEX evidence_pending_provider ON msgq_old.evidence USING btree (identity, provider_id) WHERE (outcome = ''::text);

CREATE INDEX evidence_suspect ON msgq_old.evidence USING btree (received_at, id) WHERE (outcome = 'suspect'::text);

CREATE INDEX history_delivered ON msgq_old.history USING btree (at) WHERE ((to_state = 'delivered'::text) AND applied);

CREATE INDEX history_failed ON msgq_old.history USING btree (at, reason) WHERE ((to_state = 'failed'::text) AND applied);

CREATE INDEX history_sent ON msgq_old.history USING btree (at, message_id) WHERE ((to_state = 'sent'::text) AND applied);

CREATE INDEX inbound_message ON msgq_old.inbound USING btree (message_id, received_at, id) WHERE (message_id IS NOT NULL);

CREATE UNIQUE INDEX inbound_provider_message ON msgq_old.inbound USING btree (provider, identity, provider_message_id);

CREATE INDEX inbound_received ON msgq_old.inbound USING btree (received_at, id);

CREATE INDEX inbound_text ON msgq_old.inbound USING btree (stored_at, id) WHERE ((text <> ''::text) OR (reply_title <> ''::text));

CREATE INDEX inbound_unattributed ON msgq_old.inbound USING btree (received_at, id) WHERE (message_id IS NULL);

CREATE INDEX inbound_unattributed_context ON msgq_old.inbound USING btree (context_id) WHERE ((message_id IS NULL) AND (context_id <> ''::text));

CREATE INDEX messages_due ON msgq_old.messages USING btree (lane DESC, next_attempt_at, id) INCLUDE (identity, expires_at) WHERE (state = 'queued'::text);

CREATE INDEX messages_expiring ON msgq_old.messages USING btree (expires_at) WHERE ((state = 'queued'::text) AND (expires_at IS NOT NULL));

CREATE UNIQUE INDEX messages_identity_provider_id ON msgq_old.messages USING btree (identity, provider_id, provider_id_collision) WHERE (provider_id <> ''::text);

CREATE INDEX messages_in_flight ON msgq_old.messages USING btree (updated_at) INCLUDE (state, lease_until) WHERE (state = ANY (ARRAY['sending'::text, 'unknown'::text]));

CREATE INDEX messages_maybe_sent ON msgq_old.messages USING btree (state) WHERE maybe_sent;

CREATE INDEX messages_provider_id_collision ON msgq_old.messages USING btree (identity, provider_id) WHERE (provider_id_collision <> ''::text);

CREATE INDEX messages_resends ON msgq_old.messages USING btree (resend_of) WHERE (resend_of <> ''::text);

CREATE INDEX messages_template_held ON msgq_old.messages USING btree (identity) WHERE ((state = 'queued'::text) AND (substr(last_error, 1, 15) = 'template hold: '::text));

CREATE UNIQUE INDEX messages_tenant_key ON msgq_old.messages USING btree (tenant, key);

CREATE INDEX messages_window_held ON msgq_old.messages USING btree (identity, recipient) WHERE ((state = 'queued'::text) AND (last_error = 'customer-service window closed: free-form text held'::text));

CREATE UNIQUE INDEX notices_dedupe ON msgq_old.notices USING btree (provider, identity, dedupe_key);

CREATE INDEX notices_kind ON msgq_old.notices USING btree (kind, received_at, id);

CREATE INDEX notices_received ON msgq_old.notices USING btree (received_at, id);

CREATE INDEX webhook_events_done ON msgq_old.webhook_events USING btree (received_at, id) WHERE ((processed_at IS NOT NULL) AND (error = ''::text));

CREATE INDEX webhook_events_pending ON msgq_old.webhook_events USING btree (received_at, id) WHERE (processed_at IS NULL);

CREATE INDEX webhook_events_unreadable ON msgq_old.webhook_events USING btree (received_at, id) WHERE (error <> ''::text);

