package storeopen

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
)

// warnReadableStore warns, in one line, when an existing SQLite store or its
// -wal/-shm files can be read by any user on the host. msgq creates them
// 0600 in a 0700 directory: they hold message contents, phone numbers and
// webhook bodies. A copy, a restore or a umask can widen that.
//
// Only "other" read (mode & 0o004) is warned about, not group read: a store
// shared by a drain and a webhook receiver running as two users of one group
// is a deliberate set-up (it needs group write too), and a warning on every
// cron run would be noise that hides the ones that matter. World-readable is
// never deliberate. The line says the fix.
func warnReadableStore(path string, log *slog.Logger) {
	if log == nil {
		return
	}
	var open []string
	var modes []string
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if fi.Mode().Perm()&0o004 != 0 {
			open = append(open, p)
			modes = append(modes, fmt.Sprintf("%04o", fi.Mode().Perm()))
		}
	}
	if len(open) == 0 {
		return
	}
	log.Warn("the store is readable by every user on this host (it holds message contents and phone numbers)",
		"files", strings.Join(open, " "), "modes", strings.Join(modes, " "),
		"fix", "chmod 600 "+strings.Join(open, " "))
}
