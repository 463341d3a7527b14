package front

import (
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"time"

	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/endpoint"
	"github.com/runbox/runbox/internal/recordfile"
)

// remoteDialTimeout bounds the first dial of a remote sandbox: it may
// start the endpoint and make its SSH connection or its exec stream.
const remoteDialTimeout = 20 * time.Second

// reachRemote reaches a remote sandbox (provider "ssh" or "kubernetes")
// through its persistent endpoint (package endpoint), started on first
// use, with the secret kept beside its record (<home>/<provider>/<id>, the
// provider's local record). No record, a record with another name, or a
// runboxd that does not answer through the endpoint is runbox-full's.
func reachRemote(home, provider, id, name string) (reach, bool) {
	if _, err := endpoint.Idle(); err != nil {
		return reach{}, false // endpoints are off: runbox-full reaches it
	}
	sbDir := filepath.Join(home, provider, id)
	b, err := recordfile.ReadRegular(filepath.Join(sbDir, recordfile.Name), recordfile.MaxRecord)
	if err != nil {
		return reach{}, false
	}
	var rec struct{ ID, Name string }
	if json.Unmarshal(b, &rec) != nil || rec.ID != id || name != "" && rec.Name != name {
		return reach{}, false
	}
	secret, err := daemonauth.ReadSecretFile(filepath.Join(sbDir, "secret"))
	if err != nil {
		return reach{}, false
	}
	full, err := FindFull()
	if err != nil {
		return reach{}, false
	}
	t := endpoint.Target{Home: home, Provider: provider, ID: id, Full: full}
	// The handshake waits as long as the dial may: the first connection
	// through a new endpoint waits for its SSH login or exec stream.
	dial := daemonauth.DialerWithin(func(ctx context.Context) (net.Conn, error) { return endpoint.Dial(ctx, t) },
		secret, remoteDialTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), remoteDialTimeout)
	defer cancel()
	conn, err := dial(ctx)
	if err != nil {
		endpoint.LogHandOver(t, err)
		return reach{}, false
	}
	return reach{id: id, conn: conn, dial: dial, dialBound: remoteDialTimeout}, true
}
