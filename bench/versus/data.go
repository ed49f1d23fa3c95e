package versus

import (
	"fmt"

	"github.com/riverqueue/river"

	"github.com/msgq/msgq/internal/store"
	"github.com/msgq/msgq/internal/store/storetest"
)

// row is one logical message, written by msgq as a keyed message and by
// River as a job unique by its args. Both sides get the same content.
type row struct {
	msgq  store.EnqueueParams
	river messageArgs
}

// messageArgs is the River job carrying what a msgq row carries.
type messageArgs struct {
	Key      string   `json:"key"`
	To       string   `json:"to"`
	Channel  string   `json:"channel"`
	Identity string   `json:"identity"`
	Template string   `json:"template"`
	Lang     string   `json:"lang"`
	Params   []string `json:"params"`
}

func (messageArgs) Kind() string { return "message" }

// InsertOpts makes every insert unique by args: a second insert of the same
// message is skipped as a duplicate, as msgq replays a known key.
func (messageArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// rows returns n messages. run salts the keys so that no two runs share
// one; keys are scattered (a hash, not a counter), as real idempotency keys
// are, so both unique indexes take random inserts.
func rows(run, n int) []row {
	out := make([]row, n)
	for i := range out {
		p := storetest.Params(fmt.Sprintf("k-%016x", mix(uint64(run)<<32|uint64(i))))
		p.To = fmt.Sprintf("+1555%07d", i%10_000_000)
		out[i] = row{msgq: p, river: messageArgs{
			Key: p.Key, To: p.To, Channel: p.Channel, Identity: p.Identity,
			Template: p.Payload.Template, Lang: p.Payload.Lang, Params: p.Payload.Params,
		}}
	}
	return out
}

// mix is splitmix64's finaliser: a bijection, so keys never collide.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
