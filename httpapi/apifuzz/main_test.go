package apifuzz_test

import (
	"testing"

	"gcos/postgres/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
