package verify_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/webhook/verify"
)

// The Standard Webhooks specification's published example (also in the Svix
// documentation and the reference libraries' tests).
const (
	specSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTimestamp = "1614265330"
	specBody      = `{"test": 2432232314}`
	specSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

var specNow = time.Unix(1614265330, 0)

func mustSecret(t testing.TB, s string) verify.Secret {
	t.Helper()
	sec, err := verify.ParseSecret(s)
	if err != nil {
		t.Fatalf("ParseSecret(%q): %v", s, err)
	}
	return sec
}

func secretFor(key string) string {
	return "whsec_" + base64.StdEncoding.EncodeToString([]byte(key))
}

// flip returns a copy of s with one byte changed.
func flip(s string, i int) string {
	b := []byte(s)
	b[i] ^= 0x01
	return string(b)
}

func TestWhatsApp(t *testing.T) {
	t.Parallel()
	body := []byte(`{"object":"whatsapp_business_account","entry":[]}`)
	secret := []byte("app-secret")

	// Computed here with crypto/hmac directly, so the test does not trust
	// SignWhatsApp to check WhatsApp.
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	good := "sha256=" + hex.EncodeToString(m.Sum(nil))

	t.Run("the hand-computed signature matches SignWhatsApp", func(t *testing.T) {
		t.Parallel()
		if got := verify.SignWhatsApp(body, secret); got != good {
			t.Fatalf("SignWhatsApp = %q, want %q", got, good)
		}
	})

	t.Run("a good signature is accepted, in either hex case", func(t *testing.T) {
		t.Parallel()
		for _, h := range []string{good, "sha256=" + strings.ToUpper(strings.TrimPrefix(good, "sha256="))} {
			if err := verify.WhatsApp(body, h, secret); err != nil {
				t.Fatalf("WhatsApp(%q) = %v, want nil", h, err)
			}
		}
	})

	tests := []struct {
		name   string
		body   []byte
		header string
		secret []byte
		want   error
	}{
		{"one flipped byte in the body is refused", []byte(flip(string(body), 3)), good, secret, verify.ErrBadSignature},
		{"one flipped byte in the signature is refused", body, flip(good, len(good)-1), secret, verify.ErrBadSignature},
		{"the wrong secret is refused", body, good, []byte("other-secret"), verify.ErrBadSignature},
		{"a missing header is refused", body, "", secret, verify.ErrMissingSignature},
		{"a header without sha256= is refused", body, strings.TrimPrefix(good, "sha256="), secret, verify.ErrBadSignature},
		{"a sha1= header is refused", body, "sha1=" + strings.TrimPrefix(good, "sha256="), secret, verify.ErrBadSignature},
		{"non-hex is refused", body, "sha256=zz", secret, verify.ErrBadSignature},
		{"a truncated MAC is refused", body, good[:len(good)-2], secret, verify.ErrBadSignature},
		{"an empty app secret never verifies", body, good, nil, verify.ErrNoSecret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := verify.WhatsApp(tt.body, tt.header, tt.secret); !errors.Is(err, tt.want) {
				t.Fatalf("WhatsApp = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestStandardWebhooksSpecVector(t *testing.T) {
	t.Parallel()
	s := mustSecret(t, specSecret)

	t.Run("Sign reproduces the spec's signature", func(t *testing.T) {
		t.Parallel()
		if got := verify.Sign(specID, specTimestamp, []byte(specBody), s); got != specSignature {
			t.Fatalf("Sign = %q, want %q", got, specSignature)
		}
	})

	t.Run("Verify accepts the spec's delivery", func(t *testing.T) {
		t.Parallel()
		if err := verify.Verify(specID, specTimestamp, specSignature, []byte(specBody), specNow, 0, s); err != nil {
			t.Fatalf("Verify = %v, want nil", err)
		}
	})
}

func TestStandardWebhooksHandComputed(t *testing.T) {
	t.Parallel()
	key := []byte("a key of our own, not the spec's")
	id, ts, body := "msg_1", "1700000000", []byte(`{"type":"message.delivered"}`)

	// crypto/hmac directly, so Sign is checked against an independent computation.
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "." + string(body)))
	want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))

	s := mustSecret(t, "whsec_"+base64.StdEncoding.EncodeToString(key))
	if got := verify.Sign(id, ts, body, s); got != want {
		t.Fatalf("Sign = %q, want %q", got, want)
	}
	if err := verify.Verify(id, ts, want, body, time.Unix(1700000000, 0), time.Minute, s); err != nil {
		t.Fatalf("Verify = %v, want nil", err)
	}
}

func TestStandardWebhooksVerify(t *testing.T) {
	t.Parallel()
	oldS := mustSecret(t, secretFor("old key"))
	newS := mustSecret(t, secretFor("new key"))
	other := mustSecret(t, secretFor("someone else's key"))

	now := time.Unix(1700000000, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	id := "msg_2"
	body := []byte(`{"id":"m1","status":"delivered"}`)
	sigOld := verify.Sign(id, ts, body, oldS)
	sigNew := verify.Sign(id, ts, body, newS)
	tol := 5 * time.Minute

	at := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }
	signedAt := func(d time.Duration) (string, string) {
		t := at(d)
		return t, verify.Sign(id, t, body, oldS)
	}
	staleTS, staleSig := signedAt(-tol - time.Second)
	futureTS, futureSig := signedAt(tol + time.Second)
	edgeTS, edgeSig := signedAt(-tol)
	edgeFutTS, edgeFutSig := signedAt(tol)

	tests := []struct {
		name    string
		id, ts  string
		sigs    string
		body    []byte
		secrets []verify.Secret
		want    error
	}{
		{"a good signature is accepted", id, ts, sigOld, body, []verify.Secret{oldS}, nil},
		{"the second secret is accepted during rotation", id, ts, sigNew, body, []verify.Secret{oldS, newS}, nil},
		{"the second of two signatures is accepted", id, ts, sigOld + " " + sigNew, body, []verify.Secret{newS}, nil},
		{"an unknown version before a good signature is skipped", id, ts, "v1a,AAAA " + sigOld, body, []verify.Secret{oldS}, nil},
		{"extra spaces between signatures are tolerated", id, ts, "  " + sigOld + "   " + sigNew + " ", body, []verify.Secret{newS}, nil},
		{"a timestamp exactly at the past tolerance is accepted", id, edgeTS, edgeSig, body, []verify.Secret{oldS}, nil},
		{"a timestamp exactly at the future tolerance is accepted", id, edgeFutTS, edgeFutSig, body, []verify.Secret{oldS}, nil},

		{"one flipped byte in the body is refused", id, ts, sigOld, []byte(flip(string(body), 5)), []verify.Secret{oldS}, verify.ErrBadSignature},
		{"one flipped byte in the signature is refused", id, ts, flip(sigOld, 10), body, []verify.Secret{oldS}, verify.ErrBadSignature},
		{"a different id is refused", "msg_3", ts, sigOld, body, []verify.Secret{oldS}, verify.ErrBadSignature},
		{"the wrong secret is refused", id, ts, sigOld, body, []verify.Secret{other}, verify.ErrBadSignature},
		{"a signature without a version is refused", id, ts, strings.TrimPrefix(sigOld, "v1,"), body, []verify.Secret{oldS}, verify.ErrBadSignature},
		{"only unknown versions are refused", id, ts, "v2," + strings.TrimPrefix(sigOld, "v1,"), body, []verify.Secret{oldS}, verify.ErrBadSignature},
		{"bad base64 is refused", id, ts, "v1,!!!!", body, []verify.Secret{oldS}, verify.ErrBadSignature},
		{"a truncated MAC is refused", id, ts, "v1," + base64.StdEncoding.EncodeToString([]byte("short")), body, []verify.Secret{oldS}, verify.ErrBadSignature},

		{"a stale timestamp is refused even with a genuine signature", id, staleTS, staleSig, body, []verify.Secret{oldS}, verify.ErrStaleTimestamp},
		{"a future timestamp is refused even with a genuine signature", id, futureTS, futureSig, body, []verify.Secret{oldS}, verify.ErrStaleTimestamp},
		{"a timestamp in milliseconds is refused", id, ts + "000", sigOld, body, []verify.Secret{oldS}, verify.ErrStaleTimestamp},
		{"a non-numeric timestamp is refused", id, "yesterday", sigOld, body, []verify.Secret{oldS}, verify.ErrMalformedTimestamp},
		{"a timestamp with a plus sign is refused", id, "+" + ts, sigOld, body, []verify.Secret{oldS}, verify.ErrMalformedTimestamp},
		{"a negative timestamp is refused", id, "-" + ts, sigOld, body, []verify.Secret{oldS}, verify.ErrMalformedTimestamp},
		{"a timestamp too long for int64 is refused", id, "99999999999999999999", sigOld, body, []verify.Secret{oldS}, verify.ErrMalformedTimestamp},

		{"a missing webhook-id is refused", "", ts, sigOld, body, []verify.Secret{oldS}, verify.ErrMissingSignature},
		{"a missing webhook-timestamp is refused", id, "", sigOld, body, []verify.Secret{oldS}, verify.ErrMissingSignature},
		{"a missing webhook-signature is refused", id, ts, "", body, []verify.Secret{oldS}, verify.ErrMissingSignature},

		{"no secret is a configuration error", id, ts, sigOld, body, nil, verify.ErrNoSecret},
		{"a zero Secret is a configuration error", id, ts, sigOld, body, []verify.Secret{{}}, verify.ErrNoSecret},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := verify.Verify(tt.id, tt.ts, tt.sigs, tt.body, now, tol, tt.secrets...)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}

	t.Run("a tolerance of zero means the default five minutes", func(t *testing.T) {
		t.Parallel()
		ts, sig := signedAt(-4 * time.Minute)
		if err := verify.Verify(id, ts, sig, body, now, 0, oldS); err != nil {
			t.Fatalf("4 min old: Verify = %v, want nil", err)
		}
		ts, sig = signedAt(-6 * time.Minute)
		if err := verify.Verify(id, ts, sig, body, now, 0, oldS); !errors.Is(err, verify.ErrStaleTimestamp) {
			t.Fatalf("6 min old: Verify = %v, want ErrStaleTimestamp", err)
		}
	})
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"",
		"whsec_",
		"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",       // no prefix
		"WHSEC_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", // wrong case
		"whsec_not base64!",
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS", // bad length
		"whsec_ MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	} {
		t.Run(fmt.Sprintf("%q is refused", s), func(t *testing.T) {
			t.Parallel()
			if _, err := verify.ParseSecret(s); !errors.Is(err, verify.ErrMalformedSecret) {
				t.Fatalf("ParseSecret(%q) = %v, want ErrMalformedSecret", s, err)
			}
		})
	}

	t.Run("a trailing newline from a secrets file is tolerated", func(t *testing.T) {
		t.Parallel()
		s := mustSecret(t, specSecret+"\n")
		if got := verify.Sign(specID, specTimestamp, []byte(specBody), s); got != specSignature {
			t.Fatalf("Sign = %q, want %q", got, specSignature)
		}
	})

	t.Run("printing a Secret does not reveal the key", func(t *testing.T) {
		t.Parallel()
		s := mustSecret(t, specSecret)
		for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s", s, s, s, s)} {
			if strings.Contains(out, "MfKQ") || strings.Contains(out, "31 f2") {
				t.Fatalf("printed secret leaks the key: %q", out)
			}
		}
	})
}

// FuzzStandardWebhooksVerify feeds arbitrary headers and bodies to Verify: it
// must never panic, and it may only accept when one of the space-separated
// signatures is exactly the one Sign produces (the strict decoder leaves a MAC
// a single accepted spelling).
func FuzzStandardWebhooksVerify(f *testing.F) {
	s := mustSecret(f, specSecret)
	f.Add(specID, specTimestamp, specSignature, []byte(specBody))
	f.Add(specID, specTimestamp, "v1a,xyz "+specSignature+" v1,", []byte(specBody))
	f.Add("", "", "", []byte(nil))
	f.Add("msg", "-9223372036854775808", "v1,====", []byte{0xff, 0x00})
	f.Add("m.s.g", "99999999999999999999", ",,, v1 v1,AAAA", []byte("{}"))

	f.Fuzz(func(t *testing.T, id, ts, sigs string, body []byte) {
		err := verify.Verify(id, ts, sigs, body, specNow, 0, s)
		if err != nil {
			return
		}
		want := verify.Sign(id, ts, body, s)
		for _, f := range strings.Fields(sigs) {
			if f == want {
				return
			}
		}
		t.Fatalf("Verify accepted id=%q ts=%q sigs=%q without the expected signature %q", id, ts, sigs, want)
	})
}
