package gcos

import (
	"encoding/json"
	"reflect"
	"time"
)

// Duration is a time.Duration written in configuration as a Go duration string ("200ms", "5s", "24h").
type Duration time.Duration

// Duration returns d as a time.Duration.
func (d Duration) Duration() time.Duration { return time.Duration(d) }

// String renders d like time.Duration does.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a duration string, so a dumped configuration reads back unchanged.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string. A bad value is reported as a *json.UnmarshalTypeError, which the
// decoder completes with the key's full path (e.g. scan.retry_base) for the error message.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeFor[Duration]()}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeFor[Duration]()}
	}
	*d = Duration(v)
	return nil
}
