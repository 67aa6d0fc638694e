package gcos

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"
)

// ChangeCursor is a reader's place in the verdict change log (SPEC §13 feed): every change of a transaction Seen
// sees as committed was delivered. With Upto set, the reader is paging through the changes of the transactions
// that committed between Seen and Upto, ordered by (changed_at, id), and has had those up to (AfterAt, AfterID).
// Between two reads changes come in commit order; within one read's window, in the order they were written.
type ChangeCursor struct {
	Seen    ConsistencyToken
	Upto    *ConsistencyToken
	AfterAt time.Time
	AfterID int64
}

// changeCursorVersion prefixes a cursor's text, so that a later layout can tell an old cursor apart.
const changeCursorVersion = "c1"

// String is the cursor's opaque, URL-safe text.
func (c ChangeCursor) String() string {
	parts := []string{changeCursorVersion, c.Seen.String(), "", "", ""}
	if c.Upto != nil {
		parts[2], parts[3], parts[4] = c.Upto.String(), strconv.FormatInt(c.AfterAt.UnixMicro(), 10), strconv.FormatInt(c.AfterID, 10)
	}
	return base64.RawURLEncoding.EncodeToString([]byte(strings.Join(parts, "|")))
}

// ParseChangeCursor reads a cursor's text (ChangeCursor.String); anything else is a clear EINVALID error.
func ParseChangeCursor(s string) (ChangeCursor, error) {
	bad := func(why string) (ChangeCursor, error) {
		return ChangeCursor{}, Errorf(EINVALID, "cursor %s: %s (want the next of an earlier answer of GET /v1/changes)", Quote(s), why)
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return bad("not a cursor")
	}
	parts := strings.Split(string(raw), "|")
	if len(parts) != 5 || parts[0] != changeCursorVersion {
		return bad("not a cursor of this version")
	}
	var c ChangeCursor
	if c.Seen, err = ParseConsistencyToken(parts[1]); err != nil {
		return bad("its snapshot is malformed")
	}
	if parts[2] == "" {
		if parts[3] != "" || parts[4] != "" {
			return bad("a position without a window")
		}
		return c, nil
	}
	upto, err := ParseConsistencyToken(parts[2])
	if err != nil {
		return bad("its window is malformed")
	}
	if !upto.Covers(c.Seen) {
		return bad("its window ends before it starts")
	}
	c.Upto = &upto
	micros, err1 := strconv.ParseInt(parts[3], 10, 64)
	id, err2 := strconv.ParseInt(parts[4], 10, 64)
	if err1 != nil || err2 != nil || id < 0 {
		return bad("its position is malformed")
	}
	c.AfterAt, c.AfterID = time.UnixMicro(micros).UTC(), id
	return c, nil
}
