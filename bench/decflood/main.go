// Command decflood floods a real proxy with cheap denials from one
// sandbox, with allowed calls and one chosen denial of another kind among
// them, and prints what it sent; run.sh then counts what `portcullis logs
// -o json` and the proxy's decisions.jsonl kept (issue 34: denials must
// not hide allowed traffic).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	proxy := flag.String("proxy", "http://127.0.0.1:3128", "the proxy")
	allowed := flag.String("allowed", "127.0.0.1:18099", "the upstream the policy allows (served here)")
	denied := flag.String("denied", "127.0.0.1", "a host the policy does not name")
	deniedPort := flag.Int("denied-port", 18098, "the first port of the denied host's kinds")
	kinds := flag.Int("kinds", 1, "denials of this many kinds (ports denied-port, denied-port+1, …), one after the other")
	chosen := flag.String("chosen", "127.0.0.1:18097", "another address the policy does not name (the chosen denial)")
	rate := flag.Int("rate", 600, "denials a second")
	dur := flag.Duration("duration", 10*time.Second, "how long to flood")
	every := flag.Duration("allowed-every", time.Second, "an allowed call this often")
	flag.Parse()

	ln, err := net.Listen("tcp", *allowed)
	if err != nil {
		log.Fatal(err)
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))

	pu, err := url.Parse(*proxy)
	if err != nil {
		log.Fatal(err)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu), MaxIdleConnsPerHost: 64}}
	get := func(u string) (int, string) {
		res, err := c.Get(u)
		if err != nil {
			log.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	idRe := regexp.MustCompile(`dn_[0-9a-f]+`)
	var denials, allowedOK, allowedOther atomic.Int64
	var chosenID string
	stop := time.Now().Add(*dur)
	var wg sync.WaitGroup
	// Allowed calls and the chosen denial, beside the flood.
	wg.Go(func() {
		for i := 0; time.Now().Before(stop); i++ {
			if code, _ := get(fmt.Sprintf("http://%s/allowed/%d", *allowed, i)); code == 200 {
				allowedOK.Add(1)
			} else {
				allowedOther.Add(1)
			}
			if i == int(*dur / *every / 2) {
				_, body := get(fmt.Sprintf("http://%s/chosen", *chosen))
				chosenID = idRe.FindString(body)
			}
			time.Sleep(*every)
		}
	})
	// The flood: rate a second, spread over 8 workers.
	const workers = 8
	tick := time.Second * workers / time.Duration(*rate)
	for w := range workers {
		wg.Go(func() {
			t := time.NewTicker(tick)
			defer t.Stop()
			for i := 0; time.Now().Before(stop); i++ {
				<-t.C
				port := *deniedPort + (i*workers+w)%*kinds
				if code, _ := get(fmt.Sprintf("http://%s:%d/flood/%d/%d", *denied, port, w, i)); code == http.StatusForbidden {
					denials.Add(1)
				}
			}
		})
	}
	wg.Wait()
	json.NewEncoder(os.Stdout).Encode(map[string]any{
		"denials_sent": denials.Load(), "allowed_sent": allowedOK.Load(), "allowed_not_200": allowedOther.Load(), "chosen_denial_id": chosenID,
	})
}
