package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/msgq/msgq/internal/store"
)

// dailyShareName is the health check of the daily unique-recipient limit.
const dailyShareName = "max_daily_recipients_share"

// dailyShareThreshold parses --max-daily-recipients-share: a share of the
// limit, kept in thousandths (the check's value and max in JSON).
func dailyShareThreshold(v string) (threshold, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > 1 {
		return threshold{}, usagef("--max-daily-recipients-share (health.%s) %q: want a share from 0 to 1, e.g. 0.9", dailyShareName, v)
	}
	return threshold{name: dailyShareName, flag: "max-daily-recipients-share", isShare: true, max: int64(f*1000 + 0.5)}, nil
}

// dailyShareCheck is the highest share (in thousandths) of its daily
// unique-recipient limit that any configured identity has used, and a
// message naming that identity.
func dailyShareCheck(ctx context.Context, st store.Store, ids map[string]*identity, max int64) (int64, string, error) {
	var limited []string
	for _, n := range slices.Sorted(maps.Keys(ids)) {
		if ids[n].DailyRecipients > 0 {
			limited = append(limited, n)
		}
	}
	if len(limited) == 0 {
		return 0, "", nil
	}
	used, err := st.DailyRecipientsUsed(ctx, limited)
	if err != nil {
		return 0, "", err
	}
	var top int64
	msg := ""
	for _, n := range limited {
		limit := ids[n].DailyRecipients
		share := int64(used[n]) * 1000 / int64(limit)
		if share > top || msg == "" {
			top = share
			msg = fmt.Sprintf("identity %s has used %d of its %d daily unique recipients (%s, max %s); past the limit rows to new recipients wait",
				n, used[n], limit, permille(share), permille(max))
		}
	}
	return top, msg, nil
}

// permille writes thousandths as a percentage.
func permille(v int64) string {
	return strconv.FormatFloat(float64(v)/10, 'f', 1, 64) + "%"
}
