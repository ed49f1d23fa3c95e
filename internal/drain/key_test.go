package drain

import "testing"

func TestProviderKeysDoNotCollideAcrossTenants(t *testing.T) {
	t.Parallel()
	if got := providerKey("default", "order-1"); got != "order-1" {
		t.Errorf("the default tenant's key is sent as is, got %q", got)
	}
	seen := map[string][2]string{}
	for _, tk := range [][2]string{{"default", "acme:k1"}, {"acme", "k1"}, {"a:b", "c"}, {"a", "b:c"}, {"acme", "k2"}} {
		k := providerKey(tk[0], tk[1])
		if len(k) > 64 {
			t.Errorf("%v: key %q is longer than 64", tk, k)
		}
		if prev, dup := seen[k]; dup {
			t.Errorf("%v and %v share the provider key %q", prev, tk, k)
		}
		seen[k] = tk
	}
}
