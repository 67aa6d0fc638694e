package gcos_test

import (
	"fmt"
	"strings"
	"testing"

	"gcos"
)

func TestCheckParam(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, value string
		want        string // "" accepted, else part of the message
	}{
		{"object", "birth_registry:B-1", ""},
		{"object", "café:ünïcode", ""},
		{"object", "", ""},
		{"object", strings.Repeat("a", gcos.MaxParamBytes), ""},
		{"object", strings.Repeat("a", gcos.MaxParamBytes+1), "longer than 512"},
		{"object", "x:\xff", "not valid UTF-8"},
		{"object", "x:\x00", "NUL byte"},
		{"group", "a\nb", "control characters"},
		{"group", "a\x7fb", "control characters"},
		{"\xffname", "v", "name is not valid UTF-8"},
	} {
		err := gcos.CheckParam(tc.name, tc.value)
		if (err == nil) != (tc.want == "") {
			t.Errorf("CheckParam(%q, %q) = %v, want ok=%v", tc.name, tc.value, err, tc.want == "")
			continue
		}
		if err == nil {
			continue
		}
		if gcos.ErrorCode(err) != gcos.EINVALID || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckParam(%q, %q) = %v (%s), want EINVALID naming %q", tc.name, tc.value, err, gcos.ErrorCode(err), tc.want)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.name)) {
			t.Errorf("CheckParam(%q): %v does not name the parameter", tc.name, err)
		}
	}
}
