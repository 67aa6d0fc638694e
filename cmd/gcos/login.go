package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"gcos"
)

// LoginLink is `gcos login --json`: POST /v1/login-links's answer.
type LoginLink struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
	Principal string    `json:"principal"`
}

// loginCommand is `gcos login`: a one-time link that signs a browser into the running daemon's dashboard, acting
// as this command's caller (the run token's local caller as --by, or GCOS_TOKEN's principal) with its roles. Only
// a daemon holds sessions, so there is no database path.
func (a *app) loginCommand() *cobra.Command {
	var by string
	cmd := &cobra.Command{
		Use:   "login",
		Short: "print a one-time link that signs a browser into the running daemon's dashboard",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api := a.daemonAPI(cmd.Context())
			if api == nil {
				return gcos.Errorf(gcos.EUNAVAILABLE, "no daemon serves the data dir %s for this database: start one with `gcos up` (it prints a login link)", a.dataDir)
			}
			var link LoginLink
			if err := api.as(by).post(cmd.Context(), "/v1/login-links", struct{}{}, &link); err != nil {
				return err
			}
			return a.print(link, fmt.Sprintf("%s\n(works once, until %s; signs in as %s)\n", link.URL, link.ExpiresAt.UTC().Format(time.RFC3339), link.Principal))
		},
	}
	byFlag(cmd.Flags(), &by, "the principal the dashboard acts as (on the daemon's run token)")
	return cmd
}
