package main

import (
	"os"
	"os/user"
	"strings"

	"github.com/spf13/pflag"

	"gcos"
)

// Who the CLI acts as. On the database path the CLI holds the database credential itself, so the principal is
// the --by it names (with principals configured, one of them holding the role the action needs); through the
// daemon it is the same --by on the daemon's run token, or the principal of GCOS_TOKEN when that is set. The
// operating-system user is recorded beside it either way.

// tokenEnv holds a principal's API token: the CLI then acts as that principal through the daemon (and the gate
// command asks a --server with it).
const tokenEnv = "GCOS_TOKEN"

// principalEnv is the default of --by.
const principalEnv = "GCOS_PRINCIPAL"

// osUser is the operating-system user the CLI runs as ("" when it cannot be told).
func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return os.Getenv("USER")
}

// byFlag adds --by, the principal the command acts as: GCOS_PRINCIPAL, else the operating-system user.
func byFlag(f *pflag.FlagSet, by *string, what string) {
	def := strings.TrimSpace(os.Getenv(principalEnv))
	if def == "" {
		def = osUser()
	}
	f.StringVar(by, "by", def, what+" (env "+principalEnv+", else the operating-system user)")
}

// cliActor is the actor of a CLI command acting as by.
func cliActor(by string) gcos.Actor {
	by = strings.TrimSpace(by)
	return gcos.Actor{Principal: by, Name: by, OSUser: osUser(), Via: gcos.ViaCLI}
}
