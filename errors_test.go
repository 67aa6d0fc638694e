package gcos_test

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"gcos"
)

func TestErrorCodeAndMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		err      error
		wantCode string
		wantMsg  string
	}{
		{"nil", nil, "", ""},
		{"domain", gcos.Errorf(gcos.ENOTFOUND, "group %s not found", "abc"), gcos.ENOTFOUND, "group abc not found"},
		{"wrapped domain", fmt.Errorf("gate: %w", gcos.Errorf(gcos.EINVALID, "bad ref")), gcos.EINVALID, "bad ref"},
		{"plain error is internal and hidden", errors.New("dial tcp 10.0.0.1: refused"), gcos.EINTERNAL, "internal error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := gcos.ErrorCode(tt.err); got != tt.wantCode {
				t.Errorf("ErrorCode = %q, want %q", got, tt.wantCode)
			}
			if got := gcos.ErrorMessage(tt.err); got != tt.wantMsg {
				t.Errorf("ErrorMessage = %q, want %q", got, tt.wantMsg)
			}
		})
	}
}

func TestErrorfKeepsCause(t *testing.T) {
	t.Parallel()
	err := gcos.Errorf(gcos.EINVALID, "config: %w", fs.ErrNotExist)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("errors.Is(%v, fs.ErrNotExist) = false", err)
	}
	if err.Error() != "config: file does not exist" {
		t.Fatalf("Error() = %q", err.Error())
	}
	if errors.Unwrap(gcos.Errorf(gcos.EINVALID, "no cause %d", 1)) != nil {
		t.Fatal("an error without %w must not unwrap")
	}
}
