-- 0019: enqueue() reads what 0018 still left to msgq send
-- (docs/sql-enqueue.md).
--
-- Phone numbers beyond ASCII: nyaruka/phonenumbers reads any decimal
-- digit (\p{Nd}), the full-width plus and its Unicode punctuation
-- (VALID_PUNCTUATION: dashes, the no-break and ideographic spaces,
-- full-width brackets, ...) and full-width or Cyrillic extension labels.
-- Its expressions are translated from Go's syntax and its character
-- mappings generated into phone_metadata.sql (phonechars_test.go) as
-- phone_re(name) and phone_map(name), loaded by Migrate with the
-- metadata, so they follow the library (and Go's Unicode tables) without
-- a migration. The functions below read numbers through them (plpgsql:
-- on a new schema they are loaded after the migrations).
--
-- RFC 3966 tel: URIs with ;phone-context= are read as the library's
-- buildNationalNumberForParsing reads them.

-- phone_viable is the library's isViablePhoneNumber: at least two bytes,
-- and VALID_PHONE_NUMBER_PATTERN.
CREATE OR REPLACE FUNCTION phone_viable(num text) RETURNS boolean LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN octet_length(num) >= 2 AND num ~ phone_re('viable');
END $$;

-- phone_normalize is the library's normalize: with three ASCII letters or
-- more (a vanity number) what maps to a keypad digit is kept, as that
-- digit, and anything else dropped (non-ASCII digits too); otherwise
-- NormalizeDigitsOnly: decimal digits are kept (the Arabic-Indic,
-- Persian and full-width ones as ASCII digits; any other script's as they
-- are, which normalize_phone refuses), anything else dropped.
CREATE OR REPLACE FUNCTION phone_normalize(num text) RETURNS text LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF num ~ phone_re('alpha') THEN
        RETURN regexp_replace(translate(num, phone_map('vanity_from'), phone_map('vanity_to')), '[^0-9]', '', 'g');
    END IF;
    RETURN regexp_replace(translate(num, phone_map('digits_from'), phone_map('digits_to')), phone_re('not_digit'), '', 'g');
END $$;

-- phone_extract_possible is the library's extractPossibleNumber: from the
-- first plus or digit, less trailing characters (UNWANTED_END_CHAR_PATTERN
-- as Go reads it) and a second number (/x...).
CREATE OR REPLACE FUNCTION phone_extract_possible(s text) RETURNS text LANGUAGE plpgsql STABLE AS $$
DECLARE
    num text;
    i   integer := regexp_instr(s, phone_re('start'));
BEGIN
    IF i = 0 THEN
        RETURN '';
    END IF;
    num := substr(s, i);
    i := regexp_instr(num, phone_re('unwanted_end'));
    IF i > 0 THEN
        num := left(num, i - 1);
    END IF;
    i := regexp_instr(num, phone_re('second_number'));
    IF i > 0 THEN
        num := left(num, i - 1);
    END IF;
    RETURN num;
END $$;

-- phone_extract_calling_code is 0018's, with the full-width plus too.
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
    IF number ~ phone_re('plus') THEN
        full_num := phone_normalize(regexp_replace(number, phone_re('plus'), ''));
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

-- normalize_phone is internal/phone.Normalize (0018's, now beyond ASCII
-- and with RFC 3966 phone-contexts).
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
    ctx  text;
    i    integer;
    j    integer;
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
    SELECT * INTO dm FROM phone_metadata p WHERE p.region = reg AND reg <> '001';
    -- buildNationalNumberForParsing: an RFC 3966 phone-context must be a
    -- global number's digits (+1-212: put before the number) or a domain
    -- name (dropped); the number is what lies between tel: and it.
    i := strpos(s, ';phone-context=');
    IF i > 0 THEN
        ctx := substr(s, i + length(';phone-context='));
        IF strpos(ctx, ';') > 0 THEN
            ctx := left(ctx, strpos(ctx, ';') - 1);
        END IF;
        IF ctx = '' OR NOT (ctx ~ phone_re('global_number_digits') OR ctx ~ phone_re('domainname')) THEN
            why := 'the phone number supplied is not a number';
            RETURN;
        END IF;
    END IF;
    IF i > 1 THEN
        num := CASE WHEN left(ctx, 1) = '+' THEN ctx ELSE '' END;
        j := strpos(s, 'tel:');
        j := CASE WHEN j > 0 AND j < i THEN j + length('tel:') ELSE 1 END;
        num := num || substr(s, j, i - j);
    ELSE
        num := phone_extract_possible(s);
    END IF;
    -- An ISDN subaddress and what follows it are dropped.
    i := strpos(num, ';isub=');
    IF i > 1 THEN
        num := left(num, i - 1);
    END IF;
    IF NOT phone_viable(num) THEN
        why := 'the phone number supplied is not a number';
        RETURN;
    END IF;
    -- checkRegionForParsing: without a region the number must carry a plus.
    IF dm.region IS NULL AND NOT num ~ '[+\uff0b]' THEN
        why := 'invalid country code';
        RETURN;
    END IF;
    -- maybeStripExtension: an extension (ext. 12, x12, #, ;ext=12, ...)
    -- after a viable number is dropped (E.164 has none).
    i := regexp_instr(num, phone_re('extension'));
    IF i > 0 AND phone_viable(left(num, i - 1)) THEN
        num := left(num, i - 1);
    END IF;
    -- The one narrowing left (docs/sql-enqueue.md): a decimal digit the
    -- library does not map to ASCII (a script other than Arabic-Indic,
    -- Persian and full-width) stays in its number as it is, and the
    -- library then measures and converts it as bytes.
    IF phone_normalize(num) ~ phone_re('non_ascii') THEN
        why := 'write its digits as 0-9 (or Arabic-Indic, Persian or full-width digits): other scripts'' digits are for msgq send';
        RETURN;
    END IF;
    r := phone_extract_calling_code(num, dm);
    IF r.err = 'invalid country code' AND num ~ '[+\uff0b]' THEN
        -- What follows the first run of plus signs, read again.
        r := phone_extract_calling_code(regexp_replace(num, '^[^+\uff0b]*[+\uff0b]+', ''), dm);
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



-- normalize_email is internal/recipient's email path (net/mail.ParseAddress,
-- then the domain checks and IDNA) for what SQL can read exactly: an
-- addr-spec, bare or in an angle-addr after an optional display name
-- (atoms and quoted strings, as net/mail's consumePhrase reads them: the
-- name is not stored); its local part a dot-atom, or a quoted string whose
-- content is one (stored unquoted, as net/mail gives it and msgq send
-- then requires); its domain a host name of ASCII letters,
-- digits and hyphens, two labels or more, put in lower case. Refused as
-- before: comments, groups, RFC 2047 encoded words in the name, non-ASCII
-- local parts, IP literals and internationalised domains
-- (docs/sql-enqueue.md).
CREATE OR REPLACE FUNCTION normalize_email(raw text, OUT addr text, OUT why text) LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    ws     text := E' \t\n\x0b\f\r\u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000';
    s      text := btrim(coalesce(raw, ''), ws);
    -- net/mail's atext (ASCII here), qtext and quoted-pair (WSP and VCHAR).
    atext  text := '[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]';
    mb     text := '\u0080-\ud7ff\ue000-\U0010ffff';
    qs     text := '"(?:[\u0020\u0009\u0021\u0023-\u005b\u005d-\u007e]|\\[\u0020\u0009\u0021-\u007e])*"';
    label  text := '[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?';
    spec   text;
    g      text[];
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
    -- consumeAddrSpec: the local part, @, optional spaces, the domain.
    spec := '(' || atext || '+(?:\.' || atext || '+)*|' || qs || ')@[ \t]*(' || label || '(?:\.' || label || ')+)';
    -- net/mail tries a bare addr-spec first (then spaces may follow), and
    -- falls back to a display name (words: permissive atoms, which may hold
    -- dots and any non-ASCII character, or quoted strings) and an angle-addr.
    g := regexp_match(s, '^()' || spec || '[ \t]*$');
    IF g IS NULL THEN
        g := regexp_match(s, '^((?:[ \t]*(?:[A-Za-z0-9!#$%&''*+/=?^_`{|}~.' || mb || '-]+|"(?:[\u0020\u0009\u0021\u0023-\u005b\u005d-\u007e'
            || mb || ']|\\[\u0020\u0009\u0021-\u007e' || mb || '])*"))*)[ \t]*<[ \t]*' || spec || '>[ \t]*$');
        -- An atom of the name that reads as an RFC 2047 encoded word is
        -- decoded by net/mail (or ends the name): refused here.
        IF g IS NOT NULL AND g[1] ~ '=\?' THEN
            g := NULL;
        END IF;
    END IF;
    IF g IS NULL THEN
        why := 'must be an address like ada@example.com or Ada <ada@example.com> (comments, groups, encoded names, non-ASCII local parts and non-ASCII domains go through msgq send)';
        RETURN;
    END IF;
    local := g[2];
    IF left(local, 1) = '"' THEN
        local := regexp_replace(substr(local, 2, length(local) - 2), '\\(.)', '\1', 'g');
        -- net/mail gives the local part unquoted; msgq send then refuses
        -- what does not read back as itself (store.EnqueueParams.Validate's
        -- recipient.Valid): so a quoted local part is taken when its
        -- content is a dot-atom ("ada"@example.com is ada@example.com).
        IF NOT local ~ ('^' || atext || '+(?:\.' || atext || '+)*$') THEN
            why := 'a quoted local part must read as a plain one (msgq send stores it unquoted)';
            RETURN;
        END IF;
    END IF;
    domain := lower(g[3]);
    -- An A-label (xn--) is IDNA's to check: refused here rather than
    -- passed unchecked.
    IF domain ~ '(^|\.)..--' OR octet_length(domain) > 253 THEN
        why := 'the domain must be a plain host name like example.com (IDNA domains go through msgq send)';
        RETURN;
    END IF;
    addr := local || '@' || domain;
END $$;

DROP FUNCTION phone_extension_re();

-- CREATE OR REPLACE drops a function's settings: every function reads
-- its own schema's tables again (0017's rule).
DO $$
DECLARE
    f text;
BEGIN
    FOREACH f IN ARRAY ARRAY['phone_viable(text)', 'phone_normalize(text)', 'phone_extract_possible(text)',
        'phone_extract_calling_code(text,phone_metadata)', 'normalize_phone(text,text)', 'normalize_email(text)'] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_catalog, pg_temp', f, current_schema());
    END LOOP;
END $$;
