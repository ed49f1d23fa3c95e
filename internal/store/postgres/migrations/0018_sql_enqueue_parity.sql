-- 0018: enqueue() as msgq send for what 0017 left to the CLI
-- (docs/sql-enqueue.md).
--
-- Phone numbers with letters: nyaruka/phonenumbers' Parse reads a vanity
-- number (three letters or more: keypad digits) and drops an extension
-- (ext. 89, x89, #, ;ext=89, ,,89); normalize_phone now reads them the
-- same way. Only ASCII is read (other scripts' digits and punctuation,
-- and RFC 3966 phone-context URIs, are refused: the documented narrowing).

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

-- CREATE OR REPLACE drops a function's settings: every function reads
-- its own schema's tables again (0017's rule).
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['phone_extension_re()', 'phone_viable(text)', 'phone_normalize(text)',
        'phone_extract_calling_code(text,phone_metadata)', 'normalize_phone(text,text)'] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_catalog, pg_temp', f, current_schema());
    END LOOP;
END $$;
