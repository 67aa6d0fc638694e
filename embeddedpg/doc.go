// Package embeddedpg owns GCOS's private PostgreSQL cluster: the "embedded default" used when no database URL is
// given. It finds the PostgreSQL server binaries installed on the machine, creates a cluster in <DataDir>/pg on
// first use, starts it on a free 127.0.0.1 port and stops it again. It does not download anything.
//
// Layout of the data dir (./.gcos by default in the CLI):
//
//	gcos.lock   exclusive flock held by the owning process for the Cluster's lifetime; holds its pid
//	pg/         the PostgreSQL data directory (initdb -U postgres -E UTF8 --locale=C)
//	pg.log      the server log (rotated to pg.log.1 past 16 MiB at start)
//	pg.pass     the superuser password used over TCP (mode 0600)
//	port        the TCP port of the running server, for people and logs
//	run/        the unix socket directory (a private directory under /tmp when this path is too long for a socket)
//
// Decisions worth knowing:
//
//   - Authentication: the unix socket (in a 0700 directory) uses trust, TCP on 127.0.0.1 uses scram-sha-256 with a
//     random password kept in pg.pass, so other local users cannot become superuser of the cluster through the
//     port. DSN carries the password; do not log it.
//   - Root: PostgreSQL refuses to run as root. When gcos runs as root, initdb, pg_ctl and the server run as the
//     owner of an existing cluster, else as user postgres, else nobody; the cluster directory is chowned to that
//     user and any directory on the path that the user cannot search gets the search (x) bit it lacks, with a
//     warning in the log naming the directory.
//   - Concurrency: a second process on the same data dir gets ErrDataDirInUse. A postmaster left running by a
//     process that died without stopping it (lock free, postmaster.pid naming a live postmaster whose working
//     directory is this cluster) is stopped with a fast shutdown and started again with the current settings,
//     rather than adopted: its port and settings are unknown. A stale postmaster.pid after a kill -9 whose pid is
//     dead is discarded by PostgreSQL itself; one whose pid is a zombie or was reused by an unrelated process is
//     removed by Start once no process runs in the cluster any more (the orphaned children of a killed
//     postmaster exit within moments; Start waits up to 10 s for them).
//   - Lifetime: pg_ctl starts the server in its own session, so a terminal's Ctrl-C reaches gcos only; the caller's
//     signal handling calls Stop. A server outliving a crashed gcos is stopped by the next Start (see above).
//   - Settings: every cluster gets synchronous_commit=off, shared_buffers=256MB, max_connections=100,
//     work_mem=64MB, maintenance_work_mem=256MB, max_wal_size=2GB and checkpoint_timeout=15min; Config.Settings
//     adds to or overrides them (except listen_addresses, port and unix_socket_directories, which Start owns).
//   - Durability: the default cluster keeps fsync on (synchronous_commit is off: a crash may lose the last few
//     hundred milliseconds of commits but never corrupts). Config.Ephemeral turns fsync and full_page_writes
//     off, for throwaway test clusters only.
package embeddedpg
