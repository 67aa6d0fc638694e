package gate

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"gcos"
	"gcos/postgres"
)

// A resource search (AuthZEN's, beyond the standard's guarantee): which objects of a collection may an action be
// done on, paged, where every page of one search is read from one instant. The first page exports a snapshot of
// the database from a transaction the gate holds open (gate.search_hold since the search's last page, at most
// gate.search_max at once); every later page reads in a transaction set to that snapshot, at the first page's
// clock, so the whole result is one state however long the caller takes between pages (within the hold) and
// whichever GCOS process answers it. A page judges each object as the gate's database path does, with no
// follow-up and no re-scan: a stale or unknown high-risk object is not listed (fail closed).

// SearchQuery asks for one page of a resource search.
type SearchQuery struct {
	Collection string
	Action     string
	Limit      int    // results per page at most (1 to gate.batch_max)
	PageToken  string // "" for the first page, else the previous page's Next
}

// SearchPage is one page: the entity codes the action is allowed on, in code order, and the token of the next
// page ("" at the end). AsOf and Token name the one state every page of the search is read from.
type SearchPage struct {
	Codes   []string
	Next    string
	Scanned int // objects judged for this page
	AsOf    time.Time
	Token   string
}

// searchCursor is what a page token carries (opaque to the caller: base64url JSON).
type searchCursor struct {
	Snapshot   string    `json:"s"`
	AsOf       time.Time `json:"t"`
	Token      string    `json:"k"`
	Collection string    `json:"c"`
	Action     string    `json:"a"`
	Limit      int       `json:"l"`
	After      string    `json:"after"`
}

var snapshotID = regexp.MustCompile(`^[0-9A-F]+-[0-9A-F]+-[0-9]+$`)

func (c searchCursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeSearchCursor(s string) (searchCursor, error) {
	var c searchCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || !snapshotID.MatchString(c.Snapshot) || c.AsOf.IsZero() || c.Limit <= 0 {
		return c, gcos.Errorf(gcos.EINVALID, "page.token: not a token this search returned")
	}
	return c, nil
}

// searchHolds are the snapshots this process holds open for the searches it started.
type searchHolds struct {
	mu      sync.Mutex
	held    map[string]*heldSnapshot
	opening int // first pages connecting now
}

type heldSnapshot struct {
	conn  *pgx.Conn
	timer *time.Timer
}

// searchScanFactor bounds the objects one page judges: a page with few allowed objects among many ends short (its
// next token continues the search) rather than reading the whole collection.
const searchScanFactor = 8

// SearchResources answers one page of a resource search.
func (g *Gate) SearchResources(ctx context.Context, q SearchQuery) (SearchPage, error) {
	if q.Limit <= 0 || q.Limit > g.cfg.Gate.BatchMax {
		return SearchPage{}, gcos.Errorf(gcos.EINVALID, "page.limit %d: want 1 to %d (gate.batch_max)", q.Limit, g.cfg.Gate.BatchMax)
	}
	if err := gcos.CheckObjectRef(q.Collection + ":x"); err != nil {
		return SearchPage{}, gcos.Errorf(gcos.EINVALID, "resource.type: %s", gcos.ErrorMessage(err))
	}
	cur := searchCursor{Collection: q.Collection, Action: q.Action, Limit: q.Limit}
	if q.PageToken != "" {
		var err error
		if cur, err = decodeSearchCursor(q.PageToken); err != nil {
			return SearchPage{}, err
		}
		if cur.Collection != q.Collection || cur.Action != q.Action || cur.Limit != q.Limit {
			return SearchPage{}, gcos.Errorf(gcos.EINVALID, "page.token: the request differs from the search's first page (resource.type, action, page.limit must stay the same)")
		}
		g.search.extend(cur.Snapshot, g.cfg.Gate.SearchHold.Duration())
	} else {
		var err error
		if cur.Snapshot, cur.AsOf, cur.Token, err = g.holdSnapshot(ctx); err != nil {
			return SearchPage{}, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, g.cfg.Gate.Timeout.Duration())
	defer cancel()
	page := SearchPage{AsOf: cur.AsOf, Token: cur.Token}
	err := pgx.BeginTxFunc(ctx, g.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		// The identifier was checked against its only form above: SET TRANSACTION SNAPSHOT takes no parameter.
		if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+cur.Snapshot+"'"); err != nil {
			return err
		}
		b := g.core.BirthBinding()
		rows, err := tx.Query(ctx, b.SQL(`SELECT {code} FROM {t} WHERE {coll} = $1 AND {code} > $2 ORDER BY {code} LIMIT $3`),
			cur.Collection, cur.After, q.Limit*searchScanFactor+1)
		if err != nil {
			return err
		}
		codes, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		more := len(codes) > q.Limit*searchScanFactor
		if more {
			codes = codes[:len(codes)-1]
		}
		for start := 0; start < len(codes) && len(page.Codes) < q.Limit; start += g.cfg.Gate.BatchMax {
			chunk := codes[start:min(start+g.cfg.Gate.BatchMax, len(codes))]
			refs := make([]postgres.ObjectRef, len(chunk))
			for i, c := range chunk {
				refs[i] = postgres.ObjectRef{Collection: cur.Collection, Code: c}
			}
			reads, err := g.batchReadsIn(ctx, tx, refs, cur.AsOf, cur.Token)
			if err != nil {
				return err
			}
			for i, ref := range refs {
				page.Scanned++
				cur.After = ref.Code
				res, _ := g.judge(ref, cur.Action, reads[i], GateResult{Decision: gcos.GateBlock})
				if res.Decision == gcos.GateAllow {
					page.Codes = append(page.Codes, ref.Code)
					if len(page.Codes) == q.Limit {
						break
					}
				}
			}
		}
		if more || (page.Scanned < len(codes)) {
			page.Next = cur.encode()
		}
		return nil
	})
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "22023" { // invalid_parameter_value: the snapshot is no longer held
			return SearchPage{}, gcos.Errorf(gcos.EINVALID, "page.token: the search's snapshot is no longer held (gate.search_hold %s since its last page); start the search again",
				g.cfg.Gate.SearchHold.Duration())
		}
		return SearchPage{}, fmt.Errorf("resource search page: %w", err)
	}
	if page.Next == "" {
		g.search.release(cur.Snapshot)
	}
	return page, nil
}

// holdSnapshot opens a transaction on a connection of its own, exports its snapshot and holds it for
// gate.search_hold; it returns the snapshot's identifier, clock and consistency token.
func (g *Gate) holdSnapshot(ctx context.Context) (id string, at time.Time, token string, err error) {
	h := g.search
	h.mu.Lock()
	n := len(h.held) + h.opening
	if n < g.cfg.Gate.SearchMax {
		h.opening++ // a place taken while the connection opens, so concurrent first pages cannot pass the bound
	}
	h.mu.Unlock()
	if n >= g.cfg.Gate.SearchMax {
		return "", at, "", gcos.Errorf(gcos.EUNAVAILABLE, "%d resource searches are in progress (gate.search_max); retry shortly", n)
	}
	defer func() {
		h.mu.Lock()
		h.opening--
		h.mu.Unlock()
	}()
	conn, err := pgx.ConnectConfig(ctx, g.pool.Config().ConnConfig.Copy())
	if err != nil {
		return "", at, "", fmt.Errorf("resource search: connect: %w", err)
	}
	if _, err = conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"); err == nil {
		err = conn.QueryRow(ctx, `SELECT pg_export_snapshot(), now(), pg_current_snapshot()::text`).Scan(&id, &at, &token)
	}
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return "", at, "", fmt.Errorf("resource search: export a snapshot: %w", err)
	}
	hold := g.cfg.Gate.SearchHold.Duration()
	h.mu.Lock()
	h.held[id] = &heldSnapshot{conn: conn, timer: time.AfterFunc(hold, func() { h.release(id) })}
	h.mu.Unlock()
	return id, at, token, nil
}

// extend keeps a held snapshot for another hold (a later page answered by the process holding it).
func (h *searchHolds) extend(id string, hold time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.held[id]; s != nil {
		s.timer.Reset(hold)
	}
}

// release ends a held snapshot's transaction and closes its connection.
func (h *searchHolds) release(id string) {
	h.mu.Lock()
	s := h.held[id]
	delete(h.held, id)
	h.mu.Unlock()
	if s != nil {
		s.timer.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// End the transaction before the connection: a closed socket ends it only when the server notices, and
		// until then its snapshot could still be imported.
		_, _ = s.conn.Exec(ctx, "ROLLBACK")
		_ = s.conn.Close(ctx)
	}
}

// Held is how many resource-search snapshots this gate holds open.
func (g *Gate) Held() int {
	h := g.search
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

// ReleaseSearches releases every snapshot the gate holds for resource searches (Run does at its end).
func (g *Gate) ReleaseSearches() {
	h := g.search
	h.mu.Lock()
	ids := slices.Collect(maps.Keys(h.held))
	h.mu.Unlock()
	for _, id := range ids {
		h.release(id)
	}
}
