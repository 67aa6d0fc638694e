package gcos_test

import (
	"testing"

	"gcos"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		secrets []string
		want    string
	}{
		{"postgres://gcos:s3cret@db:5432/gov", nil, "postgres://gcos:xxxxx@db:5432/gov"},
		{"dial postgresql://u:p%40ss@h/db?sslmode=require: refused", nil, "dial postgresql://u:xxxxx@h/db?sslmode=require: refused"},
		{"postgres://gcos@db/gov", nil, "postgres://gcos@db/gov"}, // no password: unchanged
		{"postgres://db/gov", nil, "postgres://db/gov"},
		{"host=db user=gcos password=s3cret dbname=gov", nil, "host=db user=gcos password=xxxxx dbname=gov"},
		{"host=db password = 'two words' dbname=gov", nil, "host=db password = xxxxx dbname=gov"},
		{"PASSWORD=s3cret", nil, "PASSWORD=xxxxx"},
		{"Authorization: Bearer reader-token-0123", []string{"reader-token-0123"}, "Authorization: Bearer xxxxx"},
		{"token abc in text", []string{"abc"}, "token abc in text"}, // too short to replace safely
		{"the password is required", nil, "the password is required"},
		{"", []string{"secret"}, ""},
	} {
		if got := gcos.Redact(tc.in, tc.secrets...); got != tc.want {
			t.Errorf("Redact(%q, %q) = %q, want %q", tc.in, tc.secrets, got, tc.want)
		}
	}
}

func TestURLSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dsn  string
		want int // how many forms, 0 = none
		pw   string
	}{
		{"postgres://u:s3cret@h/db", 3, "s3cret"},
		{"postgres://u:p%40ss@h/db", 3, "p@ss"},
		{"postgres://u@h/db", 0, ""},
		{"host=h password=kw-secret", 1, "kw-secret"},
		{"", 0, ""},
	} {
		got := gcos.URLSecrets(tc.dsn)
		if len(got) != tc.want || (tc.want > 0 && got[0] != tc.pw) {
			t.Errorf("URLSecrets(%q) = %q, want %d forms starting %q", tc.dsn, got, tc.want, tc.pw)
		}
	}
}
