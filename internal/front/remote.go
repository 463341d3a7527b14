package front

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/runbox/runbox/internal/daemonauth"
	"github.com/runbox/runbox/internal/endpoint"
)

// remoteDialTimeout bounds the first dial of a remote sandbox: it may
// start the endpoint and make its SSH connection.
const remoteDialTimeout = 20 * time.Second

// reachSSH reaches an ssh sandbox through its persistent endpoint
// (package endpoint), started on first use, with the secret kept beside
// its record (<home>/ssh/<id>). No record, a record with another name, or
// a runboxd that does not answer through the endpoint is runbox-full's.
func reachSSH(home, id, name string) (reach, bool) {
	sbDir := filepath.Join(home, "ssh", id)
	b, err := os.ReadFile(filepath.Join(sbDir, "sandbox.json"))
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
	t := endpoint.Target{Home: home, Provider: "ssh", ID: id, Full: full}
	dial := daemonauth.Dialer(func(ctx context.Context) (net.Conn, error) { return endpoint.Dial(ctx, t) }, secret)
	ctx, cancel := context.WithTimeout(context.Background(), remoteDialTimeout)
	defer cancel()
	conn, err := dial(ctx)
	if err != nil {
		return reach{}, false
	}
	return reach{id: id, conn: conn, dial: dial}, true
}
