package main

import "errors"

func openEtcd(e *env, secret []byte, endpoints string) (*leased, error) {
	return nil, errors.New("etcd leases are not wired yet")
}

func openState(e *env, secret []byte, dir string) (*leased, error) {
	return nil, errors.New("the state directory is not wired yet; use --nodes")
}

func stateSecret(e *env) ([]byte, error) {
	return nil, errors.New("no secret: use --secret-file, RANDFLAKE_SECRET_FILE or RANDFLAKE_SECRET")
}
