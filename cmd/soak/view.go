package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/domain"
)

// viewCatchUp bounds the wait for the projector to apply the last events.
const viewCatchUp = 60 * time.Second

// features are the optional parts of the ledger binary the soak uses when they exist.
type features struct {
	// projector: `ledger serve --roles projector` runs the projections.
	projector bool
	// verify: `ledger projections verify status` compares the status view with a fresh fold.
	verify bool
}

func probeFeatures(ledger string) features {
	serveHelp, _ := exec.Command(ledger, "serve", "--help").CombinedOutput()
	verifyHelp, err := exec.Command(ledger, "projections", "verify", "--help").CombinedOutput()
	return features{
		projector: bytes.Contains(serveHelp, []byte("projector")),
		verify:    err == nil && bytes.Contains(verifyHelp, []byte("projections verify")),
	}
}

// folded is what a fresh fold says a status row must hold.
type folded struct {
	State    domain.State `json:"state"`
	Version  int          `json:"version"`
	Attempts int          `json:"attempts"`
}

func foldAll(streams map[string][]domain.Event) map[string]folded {
	out := make(map[string]folded, len(streams))
	for id, events := range streams {
		if d, err := domain.Rehydrate(events); err == nil {
			out[id] = folded{State: d.State(), Version: d.Version(), Attempts: d.Attempt()}
		}
	}
	return out
}

// checkAPIStatus compares GET /v1/deliveries/{id} of every delivery with a fresh fold of its
// stream. A delivery whose history left for the archive (before the checks, or while they run:
// the retention pass goes on) is answered 410 archived; it must then be in the archive, with the
// same fold. It returns how many were answered archived.
func checkAPIStatus(ctx context.Context, v *verdict, api string, want map[string]folded, a *archiveReader) (archived int) {
	client := &http.Client{Timeout: 10 * time.Second}
	ids := sortedKeys(want)
	work := make(chan string)
	var mu sync.Mutex
	var diffs, gone []string
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				got, err := getStatus(ctx, client, api, id)
				if err == nil && got == want[id] {
					continue
				}
				mu.Lock()
				switch {
				case errors.Is(err, errArchived):
					gone = append(gone, id)
				case err != nil:
					diffs = append(diffs, fmt.Sprintf("%s: %v", id, err))
				default:
					diffs = append(diffs, fmt.Sprintf("%s: API %+v, fold %+v", id, got, want[id]))
				}
				mu.Unlock()
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	if len(gone) > 0 {
		if err := a.refresh(ctx); err != nil {
			v.fail("read the archive: %v", err)
		}
	}
	for _, id := range gone {
		events, _, ok := a.lookup(id)
		if !ok {
			diffs = append(diffs, id+": the API answers 410 archived, the archive does not hold it")
			continue
		}
		if got := foldAll(map[string][]domain.Event{id: events})[id]; got != want[id] {
			diffs = append(diffs, fmt.Sprintf("%s: archived %+v, fold %+v", id, got, want[id]))
		}
	}
	if len(diffs) > 0 {
		v.fail("the API's status differs from a fresh fold for %d deliveries (first: %s)", len(diffs), diffs[0])
	}
	return len(gone)
}

// errArchived: the API answered 410 archived: the delivery's history left the hot store.
var errArchived = errors.New("archived")

func getStatus(ctx context.Context, client *http.Client, api, id string) (folded, error) {
	var got folded
	for try := 0; ; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, api+"/v1/deliveries/"+id, nil)
		if err != nil {
			return got, err
		}
		req.Header.Set("Authorization", "Bearer "+soakAPIKey)
		resp, err := client.Do(req)
		if err == nil {
			err = func() error {
				defer resp.Body.Close()
				var problem struct {
					Reason string `json:"reason"`
				}
				switch {
				case resp.StatusCode == http.StatusGone && json.NewDecoder(resp.Body).Decode(&problem) == nil && problem.Reason == "archived":
					return errArchived
				case resp.StatusCode != http.StatusOK:
					return fmt.Errorf("GET status: %s", resp.Status)
				}
				return json.NewDecoder(resp.Body).Decode(&got)
			}()
		}
		if err == nil || errors.Is(err, errArchived) || try >= 3 || ctx.Err() != nil {
			return got, err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// checkStatusView waits until the projector's status view holds, for every delivery, what a
// fresh fold of its stream says, then runs `ledger projections verify status`. A delivery whose
// history left for the archive may have lost its row with it (a view's partition leaves once no
// partition of the history older than it stays): it must then be in the archive. A row that
// stays must still equal the fold.
func checkStatusView(ctx context.Context, v *verdict, pool *pgxpool.Pool, want map[string]folded, a *archiveReader, f features, ledger string, env []string, say func(string, ...any)) {
	ids := sortedKeys(want)
	deadline := time.Now().Add(viewCatchUp)
	var diffs []string
	var got map[string]folded
	gone := 0
	for {
		var err error
		if got, err = readStatusView(ctx, pool, ids); err != nil {
			v.fail("read the status view: %v", err)
			return
		}
		if err := a.refresh(ctx); err != nil {
			v.fail("read the archive: %v", err)
			return
		}
		diffs, gone = diffs[:0], 0
		for _, id := range ids {
			row, ok := got[id]
			_, _, archived := a.lookup(id)
			switch {
			case !ok && archived:
				gone++
			case !ok:
				diffs = append(diffs, id+": no row")
			case row != want[id]:
				diffs = append(diffs, fmt.Sprintf("%s: view %+v, fold %+v", id, row, want[id]))
			}
		}
		if len(diffs) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	if len(diffs) > 0 {
		v.fail("the status view differs from a fresh fold for %d deliveries after %s (first: %s)", len(diffs), viewCatchUp, diffs[0])
	} else {
		kept := 0
		for id := range got {
			if _, _, archived := a.lookup(id); archived {
				kept++
			}
		}
		say("status view: %d rows equal a fresh fold of their streams (%d of them of archived deliveries); %d archived deliveries left with their rows",
			len(ids)-gone, kept, gone)
	}
	if !f.verify {
		return
	}
	cmd := exec.CommandContext(ctx, ledger, "projections", "verify", "status")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	text := strings.TrimSpace(string(out))
	if err == nil {
		say("ledger projections verify status: %s", lastLine(text))
		return
	}
	// The verify folds the hot store's history alone: the row of a delivery archived while
	// its view's partition stayed is an extra row to it. Those are no difference here, since
	// the row equals the archived history's fold (above).
	kept := map[string]bool{}
	for id := range got {
		if _, _, archived := a.lookup(id); archived {
			kept[id] = true
		}
	}
	if excused, ok := archivedRowsOnly(text, kept); ok {
		say("ledger projections verify status: %d differences, each the row of an archived delivery (equal to its archived history's fold)", excused)
		return
	}
	v.fail("ledger projections verify status: %v: %s", err, text)
}

// archivedRowsOnly reads the output of `ledger projections verify status` and reports whether
// every difference it names is an extra row of a delivery in archived, and as many as it counts
// are at most those rows.
func archivedRowsOnly(out string, archived map[string]bool) (int, bool) {
	shown, total := 0, -1
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "status: ")
		if !ok {
			continue
		}
		if id, ok := strings.CutSuffix(rest, ": live a row, expected (no row)"); ok {
			if !archived[id] {
				return 0, false
			}
			shown++
			continue
		}
		if _, err := fmt.Sscanf(rest, "%d differences", &total); err == nil {
			continue
		}
		return 0, false
	}
	if total < 0 || total > len(archived) || shown == 0 {
		return 0, false
	}
	return total, true
}

func readStatusView(ctx context.Context, pool *pgxpool.Pool, ids []string) (map[string]folded, error) {
	rows, err := pool.Query(ctx, `SELECT id::text, state, version, attempts FROM status_view WHERE id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]folded{}
	for rows.Next() {
		var id, state string
		var f folded
		if err := rows.Scan(&id, &state, &f.Version, &f.Attempts); err != nil {
			return nil, err
		}
		f.State = domain.State(state)
		out[id] = f
	}
	return out, rows.Err()
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
