package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// verifyReport says how many acknowledged keys the server still has: each
// 202 must be durable, so after a run (or after a kill -9 and a restart)
// every one must be found with GET /v1/messages?key=K.
type verifyReport struct {
	Checked     int      `json:"checked"`
	Present     int      `json:"present"`
	Missing     int      `json:"missing"`
	Errors      int      `json:"errors"`
	MissingKeys []string `json:"missing_keys"`
	ErrorSample []sample `json:"error_samples"`
}

// verify reads each key back over the run's connections. A refused
// connection or a 503 is retried for up to VerifyWait (a server being
// restarted), anything else but 200 and 404 is an error.
func verify(c *http.Client, o *options, seqs []int64) *verifyReport {
	v := &verifyReport{Checked: len(seqs), MissingKeys: []string{}, ErrorSample: []sample{}}
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(o.Connections, max(len(seqs), 1)) {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(seqs)) {
					return
				}
				key := o.KeyPrefix + "-" + strconv.FormatInt(seqs[i], 10)
				present, err := lookup(c, o, key)
				mu.Lock()
				switch {
				case err != nil:
					v.Errors++
					if len(v.ErrorSample) < o.Samples {
						v.ErrorSample = append(v.ErrorSample, sample{Key: key, Error: err.Error()})
					}
				case present:
					v.Present++
				default:
					v.Missing++
					if len(v.MissingKeys) < o.Samples {
						v.MissingKeys = append(v.MissingKeys, key)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return v
}

// lookup is one GET /v1/messages?key=K: true on 200 naming the key, false
// on 404.
func lookup(c *http.Client, o *options, key string) (bool, error) {
	end := time.Now().Add(o.VerifyWait)
	for {
		req, err := http.NewRequest(http.MethodGet, o.URL+"/v1/messages?key="+url.QueryEscape(key), nil)
		if err != nil {
			return false, err
		}
		req.Header.Set("Authorization", "Bearer "+o.apiKey)
		resp, err := c.Do(req)
		retry := err != nil
		if err == nil {
			body, rerr := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			switch {
			case rerr != nil:
				retry, err = true, rerr
			case resp.StatusCode == http.StatusOK:
				var m struct {
					Key *string `json:"key"`
				}
				if jerr := json.Unmarshal(body, &m); jerr != nil {
					return false, fmt.Errorf("200 with a body that is not a message: %v", jerr)
				}
				if m.Key != nil && *m.Key != key {
					return false, fmt.Errorf("asked for key %s, got the message of key %s", key, *m.Key)
				}
				return true, nil
			case resp.StatusCode == http.StatusNotFound:
				return false, nil
			case resp.StatusCode == http.StatusServiceUnavailable:
				retry, err = true, fmt.Errorf("503: %.200s", body)
			default:
				return false, fmt.Errorf("%d: %.200s", resp.StatusCode, body)
			}
		}
		if !retry || time.Now().After(end) {
			return false, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
