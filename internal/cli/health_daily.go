package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/msgq/msgq/internal/health"
	"github.com/msgq/msgq/internal/identities"
	"github.com/msgq/msgq/internal/store"
)

// dailyShareCheck is the highest share (in thousandths) of its daily
// unique-recipient limit that any configured identity has used, and a
// message naming that identity.
func dailyShareCheck(ctx context.Context, st store.Store, ids map[string]*identities.Identity, max int64) (int64, string, error) {
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
				n, used[n], limit, health.Permille(share), health.Permille(max))
		}
	}
	return top, msg, nil
}
