package postgres

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nyaruka/phonenumbers"
)

// phoneTimezones reads the phonenumbers library's number-prefix to
// time-zone map: the file the library embeds and reads with
// GetTimezonesForPrefix (data/prefix_to_timezone.xml.gz of the module, in
// its serialize.go's format: gzip of the interned values, then the keys
// as increasing varint differences, each with its value indexes). Every
// entry is checked against GetTimezonesForPrefix, so what is generated
// is what the library answers, not a reading of its format.
func phoneTimezones() (map[string][]string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/nyaruka/phonenumbers").Output()
	if err != nil {
		return nil, fmt.Errorf("the phonenumbers module: %w", err)
	}
	gz, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "data", "prefix_to_timezone.xml.gz"))
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	r := bytes.NewReader(raw)
	var n uint32
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return nil, err
	}
	vb := make([]byte, n)
	if _, err := io.ReadFull(r, vb); err != nil {
		return nil, err
	}
	values := strings.Split(string(vb), "\n")
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return nil, err
	}
	m := make(map[string][]string, n)
	key := 0
	for range n {
		d, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, err
		}
		key += int(d)
		var c uint8
		if err := binary.Read(r, binary.LittleEndian, &c); err != nil {
			return nil, err
		}
		zones := make([]string, c)
		for i := range zones {
			var v uint16
			if err := binary.Read(r, binary.LittleEndian, &v); err != nil {
				return nil, err
			}
			if int(v) >= len(values) {
				return nil, fmt.Errorf("prefix %d: value %d of %d", key, v, len(values))
			}
			zones[i] = values[v]
		}
		m[strconv.Itoa(key)] = zones
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("prefix_to_timezone: %d bytes left over", r.Len())
	}
	for p, zones := range m {
		got, err := phonenumbers.GetTimezonesForPrefix(p)
		if err != nil || !slices.Equal(got, zones) {
			return nil, fmt.Errorf("prefix %s: the file says %v, GetTimezonesForPrefix %v, %v", p, zones, got, err)
		}
		// A single zone is one quiet.ZoneOf loads; one it could not
		// would be a zone the CLI falls back from and SQL would not.
		if len(zones) == 1 && zones[0] != phonenumbers.UNKNOWN_TIMEZONE {
			if _, err := time.LoadLocation(zones[0]); err != nil {
				return nil, fmt.Errorf("prefix %s: %w", p, err)
			}
		}
	}
	return m, nil
}

// generatePhoneTimezones is phone_metadata.sql's phone_timezones rows
// (migrations/0020_sql_enqueue_quiet.sql).
func generatePhoneTimezones() (string, error) {
	m, err := phoneTimezones()
	if err != nil {
		return "", err
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	// A schema migrated short of 0020 (tests stop short: migrateTo) has
	// no phone_timezones; 0020 makes Migrate load this file again.
	b.WriteString("-- The library's number-prefix to time-zone map (phonetz_test.go), for quiet hours\n")
	b.WriteString("-- (migrations/0020_sql_enqueue_quiet.sql).\n")
	b.WriteString("DO $tz$\nBEGIN\nIF to_regclass('phone_timezones') IS NULL THEN\n    RETURN;\nEND IF;\n")
	b.WriteString("DELETE FROM phone_timezones;\nINSERT INTO phone_timezones (prefix, zones) VALUES\n")
	for i, k := range keys {
		quoted := make([]string, len(m[k]))
		for j, z := range m[k] {
			quoted[j] = `"` + z + `"`
		}
		fmt.Fprintf(&b, "('%s', '{%s}')", k, strings.Join(quoted, ","))
		if i < len(keys)-1 {
			b.WriteString(",\n")
		}
	}
	b.WriteString(";\nEND $tz$;\n")
	return b.String(), nil
}
