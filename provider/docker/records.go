package docker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"

	"github.com/runbox/runbox"
	"github.com/runbox/runbox/internal/dockerrecord"
)

// specLabel is the spec as recorded in LabelSpec.
type specLabel struct {
	Name       string   `json:"name,omitempty"`
	Image      string   `json:"image"`
	Workdir    string   `json:"workdir,omitempty"`
	Memory     int64    `json:"memory,omitempty"`
	Pids       int64    `json:"pids,omitempty"`
	CPUs       float64  `json:"cpus,omitempty"`
	Network    string   `json:"network"`
	DaemonArgs []string `json:"daemon_args,omitempty"`
}

// ctr is what the provider needs to know of a container.
type ctr struct {
	ID, Name, Image string
	State           container.ContainerState
	Labels          map[string]string
}

func fromSummary(s container.Summary) ctr {
	name := ""
	if len(s.Names) > 0 {
		name = strings.TrimPrefix(s.Names[0], "/")
	}
	return ctr{ID: s.ID, Name: name, Image: s.Image, State: s.State, Labels: s.Labels}
}

// created returns when the sandbox was created, from its label.
func (c ctr) created() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, c.Labels[LabelCreated])
	return t
}

// stateDir returns the host directory a socket-stream sandbox keeps its run
// directory in, derived from its socket label and checked to have the
// $HOME/docker/<id>/run/runboxd.sock shape (so a foreign label never points
// Remove at another directory), or "".
func (c ctr) stateDir() string { return dockerrecord.StateDir(c.Labels) }

// toSandbox describes c.
func (p *Provider) toSandbox(c ctr, alive bool) runbox.Sandbox {
	detail := map[string]string{
		"container":      c.ID,
		"container_name": c.Name,
		"image":          c.Image,
		"state":          string(c.State),
		"stream":         c.Labels[LabelStream],
	}
	if s := c.Labels[LabelSocket]; s != "" {
		detail["socket"] = s
	}
	if v := c.Labels[LabelView]; v != "" {
		detail["view"] = v
	}
	if v := c.Labels[LabelEngine]; v != "" {
		detail["engine"] = v
	}
	if v := c.Labels[LabelStreamWhy]; v != "" {
		detail["stream_why"] = v
	}
	if c.isPaused() {
		detail["paused"] = "true"
		detail["state"] = string(container.StatePaused)
	}
	if !alive {
		detail["lost"] = fmt.Sprintf("container %s is %s", c.Name, c.State)
		if c.State == container.StateRunning {
			detail["lost"] = fmt.Sprintf("container %s runs but its runboxd does not answer", c.Name)
		}
	}
	if d := c.stateDir(); d != "" {
		detail["dir"] = d
	}
	var spec specLabel
	if json.Unmarshal([]byte(c.Labels[LabelSpec]), &spec) == nil {
		if spec.Workdir != "" {
			detail["workdir"] = spec.Workdir
		}
		detail["network"] = spec.Network
		// The limits, as runbox inspect shows them (bytes, a count, CPUs).
		if spec.Memory > 0 {
			detail["memory"] = strconv.FormatInt(spec.Memory, 10)
		}
		if spec.Pids > 0 {
			detail["pids"] = strconv.FormatInt(spec.Pids, 10)
		}
		if spec.CPUs > 0 {
			detail["cpus"] = strconv.FormatFloat(spec.CPUs, 'f', -1, 64)
		}
	}
	return runbox.Sandbox{
		ID:       c.Labels[LabelSandbox],
		Name:     c.Labels[LabelName],
		Provider: ProviderName,
		Created:  c.created(),
		Alive:    alive,
		Detail:   detail,
	}
}

// containerFile, in a socket-stream sandbox's state directory, describes
// its container as the engine did at creation, so a process on this
// machine (a `runbox exec`) reaches the sandbox without asking the engine.
const containerFile = dockerrecord.ContainerFile

// save writes c to dir's containerFile.
func (c ctr) save(dir string) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("record container: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, containerFile), b, 0o600); err != nil {
		return fmt.Errorf("record container: %w", err)
	}
	return nil
}
