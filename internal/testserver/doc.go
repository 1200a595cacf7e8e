// Package testserver is the project's own plumbing for tests that run real
// server programs (etcd, PostgreSQL, kube-apiserver, the randflake
// command): loopback ports no other test binary hands out (FreePort) and
// starts that try new ports when a port was taken meanwhile
// (StartOnFreePorts), server processes with their logs, stopped by PID
// with a parent-death signal (StartServer, ServerProcess, ServerFor),
// finding and driving etcd (FindEtcd, EtcdMember, Etcdctl, EtcdHealthy,
// WaitReady), a test server's state read and changed under its lock
// (Locked, StartRefused), and a loop serving a listener's connections
// (ServeConns).
//
// It is internal: the conformance suite a store author runs is package
// leasetest, which uses only ServeConns, for its Proxy; the project's
// test helpers (etcdtest, pgtest, kubetest), the command's tests and the
// chaos runs use it.
package testserver
