package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"gcos/world"
)

func (a *app) upCommand() *cobra.Command {
	var demo bool
	var listen string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "run the daemon: intake, scans, gate API and dashboard (--demo: embedded world, live churn)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			store, err := a.openPrepared(ctx, demo)
			if err != nil {
				return err
			}
			if demo {
				var births int64
				if err := store.Pool().QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM birth_registry LIMIT 1) x`).Scan(&births); err != nil {
					return err
				}
				if births == 0 {
					a.logger.Info("demo: generating the synthetic world (1,037,724 births)")
					sum, err := world.Generate(ctx, store.Pool(), world.Options{Progress: a.stderr, Logger: a.logger})
					if err != nil {
						return err
					}
					a.logger.Info("demo: world loaded", "births", sum.Births, "elapsed", sum.Elapsed)
				}
			}
			if listen == "" {
				listen = a.cfg.HTTP.Listen
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			mux := http.NewServeMux()
			mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
			a.logger.Info("gcos up", "listen", ln.Addr().String(), "demo", demo)
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(ln) }()
			select {
			case <-ctx.Done():
			case err := <-errc:
				if !errors.Is(err, http.ErrServerClosed) {
					return err
				}
			}
			shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return srv.Shutdown(shutdown)
		},
	}
	cmd.Flags().BoolVar(&demo, "demo", false, "embedded demo: greenfield substrate, synthetic world, live churn")
	cmd.Flags().StringVar(&listen, "listen", "", "listen address (default from config, 127.0.0.1:8080)")
	return cmd
}
