package gcos_test

import (
	"strings"
	"testing"

	"gcos"
)

func TestCheckGateBatch(t *testing.T) {
	many := func(n int) []gcos.GateCheck {
		out := make([]gcos.GateCheck, n)
		for i := range out {
			out[i] = gcos.GateCheck{Object: "c:e", Action: gcos.ActionWrite}
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		checks []gcos.GateCheck
		want   string // "" accepted; else a fragment of the error
	}{
		{"one", many(1), ""},
		{"the limit", many(5), ""},
		{"no action is a write", []gcos.GateCheck{{Object: "c:e"}}, ""},
		{"read", []gcos.GateCheck{{Object: "c:e", Action: gcos.ActionRead}}, ""},
		{"empty", nil, "no checks"},
		{"over the limit", many(6), "6 checks, more than the limit of 5"},
		{"no colon", []gcos.GateCheck{{Object: "c:e"}, {Object: "ce"}}, "checks[1]: object \"ce\": want COLLECTION:CODE"},
		{"no code", []gcos.GateCheck{{Object: "c:"}}, "checks[0]"},
		{"no object", []gcos.GateCheck{{Action: gcos.ActionWrite}}, "checks[0]"},
		{"control character", []gcos.GateCheck{{Object: "c:e\x01"}}, "control characters"},
		{"unknown action", []gcos.GateCheck{{Object: "c:e"}, {Object: "c:f", Action: "delete"}}, "checks[1]: action \"delete\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := gcos.CheckGateBatch(tc.checks, 5)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("accepted, want an error naming %q", tc.want)
			case tc.want != "" && (!strings.Contains(err.Error(), tc.want) || gcos.ErrorCode(err) != gcos.EINVALID):
				t.Fatalf("error %q (%s), want EINVALID naming %q", err, gcos.ErrorCode(err), tc.want)
			}
		})
	}
}

func TestNewGateBatchAnswer(t *testing.T) {
	allow := gcos.GateAnswer{Decision: gcos.GateAllow}
	block := gcos.GateAnswer{Decision: gcos.GateBlock}
	odd := gcos.GateAnswer{Decision: "maybe"}
	for _, tc := range []struct {
		name             string
		answers          []gcos.GateAnswer
		want             string
		allowed, blocked int
	}{
		{"all allowed", []gcos.GateAnswer{allow, allow}, gcos.GateAllow, 2, 0},
		{"one block blocks the batch", []gcos.GateAnswer{allow, block, allow}, gcos.GateBlock, 2, 1},
		{"nothing asked is no allow", nil, gcos.GateBlock, 0, 0},
		{"an unknown decision is a block", []gcos.GateAnswer{allow, odd}, gcos.GateBlock, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := gcos.NewGateBatchAnswer(tc.answers)
			if b.Decision != tc.want || b.Allowed != tc.allowed || b.Blocked != tc.blocked {
				t.Fatalf("got %s (%d allowed, %d blocked), want %s (%d, %d)", b.Decision, b.Allowed, b.Blocked, tc.want, tc.allowed, tc.blocked)
			}
		})
	}
}

func TestBlockAll(t *testing.T) {
	got := gcos.BlockAll([]gcos.GateCheck{{Object: "a:b"}, {Object: "c:d", Action: gcos.ActionRead}}, "why")
	if len(got) != 2 || got[0].Action != gcos.ActionWrite || got[1].Action != gcos.ActionRead {
		t.Fatalf("got %+v", got)
	}
	for _, a := range got {
		if a.Allowed() || a.Reason != "why" {
			t.Fatalf("got %+v, want a block for the reason", a)
		}
	}
}

func TestCheckObjectRef(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"orders:o-1", true},
		{"orders:o-1:part", true}, // the code is everything after the first colon
		{"orders", false},
		{":o-1", false},
		{"orders:", false},
		{":", false},
		{"", false},
		{"orders:o\x1b[2J", false},
	} {
		if err := gcos.CheckObjectRef(tc.in); (err == nil) != tc.ok {
			t.Errorf("CheckObjectRef(%q) = %v, want ok %v", tc.in, err, tc.ok)
		}
	}
}
