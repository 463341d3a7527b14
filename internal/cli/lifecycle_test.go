package cli_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestUpLsInspect(t *testing.T) {
	setHome(t)
	id := up(t, "--name", "web")
	other := up(t)

	ls := must(t, "ls")
	if !contains(ls, "SANDBOX ID", id, "web", other, "host", "up") {
		t.Errorf("ls:\n%s", ls)
	}
	sbs := lsJSON(t)
	if len(sbs) != 2 || sbs[0].ID != id || sbs[0].Name != "web" || !sbs[0].Alive || sbs[0].Provider != "host" || sbs[1].ID != other {
		t.Errorf("ls --json: %+v", sbs)
	}

	var info struct {
		sandboxJSON
		Daemon *struct {
			Pid     int    `json:"pid"`
			Version string `json:"version"`
		} `json:"daemon"`
	}
	if err := json.Unmarshal([]byte(must(t, "inspect", "web")), &info); err != nil {
		t.Fatal(err)
	}
	if info.ID != id || info.Daemon == nil || info.Daemon.Pid == 0 {
		t.Errorf("inspect web: %+v", info)
	}
}

func TestPs(t *testing.T) {
	setHome(t)
	id := up(t)
	if o := rb(t, "exec", "--id", "first", id, "--", "exit 2"); o.code != 2 {
		t.Fatalf("exec exit 2: %+v", o)
	}
	if out := must(t, "exec", "--detach", "--id", "second", id, "--", "sleep 30"); out != "second\n" {
		t.Errorf("exec --detach printed %q; want the exec id", out)
	}
	var execs []struct {
		ID     string `json:"id"`
		State  string `json:"state"`
		Result *struct {
			ExitCode int `json:"exit_code"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(must(t, "ps", "--json", id)), &execs); err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, e := range execs {
		states[e.ID] = e.State
		if e.ID == "first" && (e.Result == nil || e.Result.ExitCode != 2) {
			t.Errorf("ps --json: first has result %+v; want exit 2", e.Result)
		}
	}
	if states["first"] != "exited" || states["second"] != "running" {
		t.Errorf("ps --json states %v; want first exited, second running", states)
	}
	if ps := must(t, "ps", id); !contains(ps, "EXEC ID", "first", "second", "running", "sleep 30") {
		t.Errorf("ps:\n%s", ps)
	}
}

func TestRm(t *testing.T) {
	setHome(t)
	a := up(t, "--name", "a")
	b := up(t)
	sbs := lsJSON(t)
	dir := sbs[0].Detail["dir"]
	if out := must(t, "rm", "a", b); out != a+"\n"+b+"\n" {
		t.Errorf("rm a b printed %q; want both ids", out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("sandbox dir after rm: %v", err)
	}
	if sbs := lsJSON(t); len(sbs) != 0 {
		t.Errorf("ls after rm: %+v", sbs)
	}
	o := rb(t, "rm", "nosuch")
	if o.code != 125 || !strings.Contains(o.stderr, "nosuch") {
		t.Errorf("rm nosuch: %+v; want 125 naming nosuch", o)
	}
}
