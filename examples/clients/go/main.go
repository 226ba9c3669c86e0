// Command leader reads leadership from the redlock-elector sidecar with net/http only.
//
//	go run . poll    # am I the leader? ask GET /leader twice a second
//	go run . watch   # the same by long-poll: GET /leader?wait=30s&version=N
//	go run . work    # run work only while leading; each write carries the fencing token
//	go run . leases  # several leases or shards: the set this replica leads, by long-poll
//	                 # of GET /leases?wait=30s&version=N (one connection at a time)
//
// Each prints a line when leadership changes, "leader=true token=7" or "leader=false token=none";
// work also prints "write token=7 n=1" for each (simulated) write; leases prints the leases it
// leads with their tokens, "leases=jobs-0:7,jobs-3:2", or "leases=none".
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// view is the part of the GET /leader answer an app needs.
type view struct {
	IsLeader     bool   `json:"is_leader"`
	FencingToken uint64 `json:"fencing_token"` // null (0) when not leader; tokens start at 1
	ValidForMs   int64  `json:"valid_for_ms"`
	Version      uint64 `json:"version"`
}

var sidecar = "http://127.0.0.1:4040"

// getLeader returns nil when the sidecar does not answer in time: treat that as "not leader".
func getLeader(query string, timeout time.Duration) *view {
	var v view
	if !get("/leader"+query, timeout, &v) {
		return nil
	}
	return &v
}

// get decodes the JSON answer to GET path into v; false when the sidecar does not answer in time.
// (Go never sends requests to loopback through an HTTP proxy, so the environment cannot divert it.)
func get(path string, timeout time.Duration, v any) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, sidecar+path, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(v) == nil
}

// show prints a change of leadership; token 0 means not leader.
func show(token uint64) {
	if token == 0 {
		fmt.Println("leader=false token=none")
	} else {
		fmt.Printf("leader=true token=%d\n", token)
	}
}

// (a) Am I the leader? Poll: one GET, answered at once.
func poll() {
	last := ^uint64(0) // nothing shown yet
	for {
		var token uint64
		if v := getLeader("", time.Second); v != nil && v.IsLeader {
			token = v.FencingToken
		}
		if token != last {
			show(token)
			last = token
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// (a) Am I the leader? Long-poll: the sidecar answers when version changes. follow calls f after
// every answer with the token (0: not leading) and the time until which the lease is known valid.
func follow(f func(token uint64, deadline time.Time)) {
	var asked uint64
	var v *view
	var deadline time.Time
	for {
		wait, timeout := 30*time.Second, 35*time.Second // a follower waits for the next change
		switch {
		case v == nil || !v.IsLeader:
		case v.Version != asked:
			// News of leadership after a long wait: its valid_for_ms counts from when it was
			// answered, not sent. Ask again at once for a deadline to rely on.
			wait, timeout = 0, time.Second
		default:
			// Renewals do not change the version: ask again well within the validity to learn
			// the new one, and count a lease with no answer by its end as lost.
			wait = time.Duration(v.ValidForMs) * time.Millisecond / 8
			timeout = max(time.Until(deadline), time.Millisecond)
		}
		asked = 0 // 0: the current state, whatever it is
		if v != nil {
			asked = v.Version
		}
		sent := time.Now() // before sending: valid_for_ms runs from a later moment
		v = getLeader(fmt.Sprintf("?wait=%dms&version=%d", wait.Milliseconds(), asked), timeout)
		switch {
		case v == nil: // unreachable: not leader
			f(0, time.Time{})
			time.Sleep(500 * time.Millisecond)
		case v.IsLeader:
			deadline = sent.Add(time.Duration(v.ValidForMs) * time.Millisecond)
			f(v.FencingToken, deadline)
		default:
			f(0, time.Time{})
		}
	}
}

func watch() {
	last := ^uint64(0) // nothing shown yet
	follow(func(token uint64, _ time.Time) {
		if token != last {
			show(token)
			last = token
		}
	})
}

// (b) Run work only while leading, and (c) hand the fencing token to every write.

// lease is the long-poll's latest answer, for the worker.
type lease struct {
	mu       sync.Mutex
	token    uint64
	deadline time.Time
}

// tokenNow is the fencing token while the lease is valid by this process's own clock, else 0:
// it turns 0 at the deadline even if the sidecar stops answering.
func (l *lease) tokenNow() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Now().Before(l.deadline) {
		return l.token
	}
	return 0
}

// write is a downstream write. The store must refuse a token lower than the highest it has
// accepted, so that a write from a paused old leader cannot land after the new leader's, e.g.
// UPDATE jobs SET state = $1, token = $2 WHERE id = $3 AND token <= $2
func write(token uint64, n int) {
	fmt.Printf("write token=%d n=%d\n", token, n)
}

func work() {
	l := &lease{}
	go follow(func(token uint64, deadline time.Time) {
		l.mu.Lock()
		l.token, l.deadline = token, deadline
		l.mu.Unlock()
	})
	last, n := ^uint64(0), 0
	for {
		token := l.tokenNow() // check before every step of work
		if token != last {
			show(token) // became leader, lost it, or a new term began
			last = token
		}
		if token != 0 {
			n++
			write(token, n)
		}
		time.Sleep(100 * time.Millisecond) // one step of work: keep each step far shorter than the lease ttl
	}
}

// (d) Several leases or shards (lease.names, lease.shards): which ones do I lead? The same
// long-poll on GET /leases, whose version changes when any lease's answer does.

// leasesView is the part of the GET /leases answer an app needs.
type leasesView struct {
	Version uint64 `json:"version"`
	Leases  []struct {
		Lease string `json:"lease"`
		view
	} `json:"leases"`
}

// owned is a lease this replica leads: its token, and the time until which it is known valid
// (act on it only before then, as with one lease).
type owned struct {
	Lease    string
	Token    uint64
	Deadline time.Time
}

// followLeases calls f after every answer with the leases led, in the sidecar's order (none
// when the sidecar does not answer).
func followLeases(f func([]owned)) {
	var asked uint64
	var v *leasesView
	var led []owned
	for {
		wait, timeout := 30*time.Second, 35*time.Second // leading none: wait for the next change
		switch {
		case len(led) == 0:
		case v.Version != asked:
			// News after a long wait: ask again at once for validities to rely on.
			wait, timeout = 0, time.Second
		default:
			// Renewals do not change the version: ask again well within the shortest validity,
			// and count the leases as lost if no answer comes by the earliest deadline.
			wait, timeout = time.Hour, time.Hour
			for _, l := range led {
				timeout = min(timeout, time.Until(l.Deadline))
			}
			for _, l := range v.Leases {
				if l.IsLeader {
					wait = min(wait, time.Duration(l.ValidForMs)*time.Millisecond/8)
				}
			}
			timeout = max(timeout, time.Millisecond)
		}
		asked = 0 // 0: the current state, whatever it is
		if v != nil {
			asked = v.Version
		}
		sent := time.Now() // before sending: valid_for_ms runs from a later moment
		v, led = &leasesView{}, nil
		if !get(fmt.Sprintf("/leases?wait=%dms&version=%d", wait.Milliseconds(), asked), timeout, v) {
			v = nil // unreachable: leading none
			f(led)
			time.Sleep(500 * time.Millisecond)
			continue
		}
		for _, l := range v.Leases {
			if l.IsLeader {
				deadline := sent.Add(time.Duration(l.ValidForMs) * time.Millisecond)
				led = append(led, owned{l.Lease, l.FencingToken, deadline})
			}
		}
		f(led)
	}
}

func leases() {
	last := "" // nothing shown yet
	followLeases(func(led []owned) {
		names := make([]string, 0, len(led))
		for _, l := range led {
			names = append(names, fmt.Sprintf("%s:%d", l.Lease, l.Token))
		}
		now := strings.Join(names, ",")
		if now == "" {
			now = "none"
		}
		if now != last {
			fmt.Printf("leases=%s\n", now)
			last = now
		}
	})
}

func main() {
	if u := os.Getenv("REDLOCK_ELECTOR_URL"); u != "" {
		sidecar = u
	}
	modes := map[string]func(){"poll": poll, "watch": watch, "work": work, "leases": leases}
	if len(os.Args) != 2 || modes[os.Args[1]] == nil {
		fmt.Fprintf(os.Stderr, "usage: %s poll|watch|work|leases\n", os.Args[0])
		os.Exit(2)
	}
	modes[os.Args[1]]()
}
