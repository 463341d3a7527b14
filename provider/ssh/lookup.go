package ssh

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/client"
)

// Get finds a sandbox by exact id, exact name or unique id prefix among
// this machine's records, and probes whether its runboxd answers (which
// takes an SSH connection to its host).
func (p *Provider) Get(ctx context.Context, idOrName string) (runbox.Sandbox, error) {
	rec, sbDir, err := p.find(idOrName)
	if err != nil {
		return runbox.Sandbox{}, &runbox.Error{Op: "get", Sandbox: idOrName, Err: err}
	}
	alive, why := p.probe(ctx, rec)
	return p.toSandbox(rec, sbDir, alive, why), nil
}

// List returns every ssh sandbox this machine made, oldest first, each
// marked Alive when its runboxd answers; hosts are asked in parallel.
func (p *Provider) List(ctx context.Context) ([]runbox.Sandbox, error) {
	dir, err := p.recordsDir()
	if err != nil {
		return nil, &runbox.Error{Op: "list", Err: err}
	}
	recs, err := readRecords(dir)
	if err != nil {
		return nil, &runbox.Error{Op: "list", Err: err}
	}
	out := make([]runbox.Sandbox, len(recs))
	var wg sync.WaitGroup
	for i, r := range recs {
		wg.Go(func() {
			alive, why := p.probe(ctx, r)
			out[i] = p.toSandbox(r, filepath.Join(dir, r.ID), alive, why)
		})
	}
	wg.Wait()
	return out, nil
}

// probe asks rec's runboxd for Info, bounded by aliveTimeout, and says why
// it is lost when it does not answer.
func (p *Provider) probe(ctx context.Context, rec record) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, aliveTimeout)
	defer cancel()
	c := client.New(p.Dialer(runbox.Sandbox{ID: rec.ID}), client.WithSandboxName(rec.ID))
	defer c.Close()
	if _, err := c.Info(ctx); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// toSandbox describes rec; why is the reason it is not alive.
func (p *Provider) toSandbox(rec record, sbDir string, alive bool, why string) runbox.Sandbox {
	sb := runbox.Sandbox{
		ID:       rec.ID,
		Name:     rec.Name,
		Provider: ProviderName,
		Created:  rec.Created,
		Alive:    alive,
		Detail: map[string]string{
			"target":      rec.Target,
			"endpoint":    rec.Endpoint,
			"pid":         strconv.Itoa(rec.Pid),
			"socket":      rec.socket(),
			"remote_dir":  rec.RemoteDir,
			"log":         rec.RemoteDir + "/runboxd.log",
			"workdir":     rec.Workdir,
			"runboxd":     rec.Runboxd,
			"containment": rec.Containment,
			"dir":         sbDir,
		},
	}
	if !alive {
		if why == "" {
			why = fmt.Sprintf("runboxd (pid %d) on %s does not answer", rec.Pid, rec.Endpoint)
		}
		sb.Detail["lost"] = why
	}
	return sb
}
