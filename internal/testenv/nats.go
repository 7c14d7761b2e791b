package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Bounds of the NATS helpers.
const (
	// natsBuildTimeout bounds scripts/nats-server.sh (a build from the
	// module proxy on a fresh machine; nothing once cached).
	natsBuildTimeout = 10 * time.Minute
	// natsStartWait bounds a cluster's start: every node's JetStream
	// healthy, which takes a leader election.
	natsStartWait = 60 * time.Second
	// natsStopWait is how long a stop waits after SIGTERM before SIGKILL.
	natsStopWait = 10 * time.Second
	// natsStartTries is how many sets of free ports StartNATSCluster tries.
	natsStartTries = 3
	// natsRoutesSettle is how long every node's routes must stay the same
	// before a cluster counts as started. A route dialled before its peer
	// listened is dialled again a second later, and the duplicate that
	// makes is closed; a gateway that subscribed during that churn was
	// seen to miss an agent's status from another node for the whole test
	// (it would see the agent's next repeat, 30 s later).
	natsRoutesSettle = 1500 * time.Millisecond
)

// NATSOptions configures StartNATSCluster.
type NATSOptions struct {
	// Nodes is the cluster's size; 0 means 3.
	Nodes int
	// Accounts is a file that each node's configuration includes, as
	// `toolbus acl export --format nats` writes it: the users the clients
	// log in as, in an account with JetStream. Required.
	Accounts string
	// MQTT are extra lines inside each node's mqtt { } block.
	MQTT []string
}

// NATSCluster is a NATS cluster started by StartNATSCluster: each node a
// nats-server process on 127.0.0.1 with JetStream (its own store in a
// temporary directory) and an MQTT listener.
type NATSCluster struct {
	Nodes []*NATSNode
}

// MQTTURLs is every node's MQTT URL, comma-separated, in node order: what
// a client given the whole cluster is configured with.
func (c *NATSCluster) MQTTURLs() string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.MQTTURL
	}
	return strings.Join(urls, ",")
}

// NATSNode is one node of a NATSCluster.
type NATSNode struct {
	// Name is the node's server_name (n1, n2, ...); MQTTURL its MQTT
	// listener, tcp://127.0.0.1:port. Both stay the same across Restart.
	Name, MQTTURL string

	t          testing.TB
	bin, conf  string
	healthzURL string
	proc
}

// NATSBinary returns the path of the nats-server that scripts/nats-server.sh
// builds from the module proxy into .cache/nats (once; later calls find
// it). The test fails when the build fails.
func NATSBinary(t testing.TB) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), natsBuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "nats-server.sh"))
	cmd.Stderr = Writer(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/nats-server.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// StartNATSCluster starts a NATS cluster on free 127.0.0.1 ports and
// returns once every node's JetStream is healthy. Each node's log goes to
// t.Log with its name. t.Cleanup stops every node (by PID).
func StartNATSCluster(t testing.TB, o NATSOptions) *NATSCluster {
	t.Helper()
	if o.Accounts == "" {
		t.Fatal("StartNATSCluster: no Accounts")
	}
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	bin := NATSBinary(t)
	var lastErr error
	for range natsStartTries {
		c, err := startNATSCluster(t, bin, o)
		if err == nil {
			return c
		}
		// Another process may take a port between our probe and a node's
		// bind: then that node exits, and we try other ports.
		lastErr = err
	}
	t.Fatalf("NATS cluster did not start: %v", lastErr)
	return nil
}

func startNATSCluster(t testing.TB, bin string, o NATSOptions) (*NATSCluster, error) {
	ports := make([]int, 4*o.Nodes) // client, cluster, MQTT, monitoring
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	port := func(node, kind int) int { return ports[4*node+kind] }
	routes := make([]string, o.Nodes)
	for i := range routes {
		routes[i] = "nats://127.0.0.1:" + strconv.Itoa(port(i, 1))
	}
	c := &NATSCluster{}
	for i := range o.Nodes {
		dir := t.TempDir()
		n := &NATSNode{
			Name:       "n" + strconv.Itoa(i+1),
			MQTTURL:    "tcp://127.0.0.1:" + strconv.Itoa(port(i, 2)),
			t:          t,
			bin:        bin,
			conf:       filepath.Join(dir, "nats.conf"),
			healthzURL: "http://127.0.0.1:" + strconv.Itoa(port(i, 3)) + "/healthz",
		}
		// NATS resolves an include from the including file's directory.
		accounts, err := os.ReadFile(o.Accounts)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(o.Accounts)), accounts, 0o600); err != nil {
			return nil, err
		}
		conf := fmt.Sprintf(`server_name: %s
listen: 127.0.0.1:%d
http: 127.0.0.1:%d
jetstream { store_dir: %q, max_memory_store: 256MB, max_file_store: 1GB }
cluster {
  name: toolbus
  listen: 127.0.0.1:%d
  routes: [%s]
}
mqtt {
  listen: 127.0.0.1:%d
%s
}
include %q
`, n.Name, port(i, 0), port(i, 3), filepath.Join(dir, "js"), port(i, 1), strings.Join(routes, ", "),
			port(i, 2), indent(o.MQTT), filepath.Base(o.Accounts))
		if err := os.WriteFile(n.conf, []byte(conf), 0o600); err != nil {
			return nil, err
		}
		t.Cleanup(n.Stop)
		c.Nodes = append(c.Nodes, n)
		if err := n.start(); err != nil {
			c.kill() // or they would join the next attempt's cluster
			return nil, err
		}
	}
	for _, n := range c.Nodes {
		if err := n.waitHealthy(natsStartWait); err != nil {
			c.kill()
			return nil, err
		}
	}
	if err := c.waitRoutesSettled(natsStartWait); err != nil {
		c.kill()
		return nil, err
	}
	return c, nil
}

// waitRoutesSettled waits until every node has routes to all the others
// and no node's routes have changed for natsRoutesSettle, or d has passed.
func (c *NATSCluster) waitRoutesSettled(d time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(d)
	var last string
	var since time.Time
	for {
		now := time.Now()
		routes, err := c.routes(client)
		switch {
		case err != nil || routes != last:
			last, since = routes, now
		case now.Sub(since) >= natsRoutesSettle:
			return nil
		}
		if now.After(deadline) {
			return fmt.Errorf("NATS routes not settled after %v (last: %v)", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// routes describes every node's routes (their IDs), or fails when a node
// has none to one of the others.
func (c *NATSCluster) routes(client *http.Client) (string, error) {
	var b strings.Builder
	for _, n := range c.Nodes {
		resp, err := client.Get(strings.TrimSuffix(n.healthzURL, "/healthz") + "/routez")
		if err != nil {
			return "", err
		}
		var rz struct {
			Routes []struct {
				RID        uint64 `json:"rid"`
				RemoteName string `json:"remote_name"`
			} `json:"routes"`
		}
		err = json.NewDecoder(resp.Body).Decode(&rz)
		_ = resp.Body.Close()
		if err != nil {
			return "", fmt.Errorf("nats %s routez: %w", n.Name, err)
		}
		peers := map[string]bool{}
		rids := make([]uint64, 0, len(rz.Routes))
		for _, r := range rz.Routes {
			peers[r.RemoteName] = true
			rids = append(rids, r.RID)
		}
		for _, o := range c.Nodes {
			if o != n && !peers[o.Name] {
				return "", fmt.Errorf("nats %s has no route to %s yet", n.Name, o.Name)
			}
		}
		slices.Sort(rids)
		fmt.Fprintf(&b, "%s%v;", n.Name, rids)
	}
	return b.String(), nil
}

// kill kills every node of a cluster that failed to start.
func (c *NATSCluster) kill() {
	for _, n := range c.Nodes {
		n.Kill()
	}
}

func indent(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// start runs the node's process.
func (n *NATSNode) start() error {
	return n.run(&prefixWriter{w: Writer(n.t), prefix: "nats " + n.Name + ": "}, n.bin, "-c", n.conf)
}

// waitHealthy waits until the node's /healthz answers 200 (JetStream
// current with its cluster), the node has exited, or d has passed.
func (n *NATSNode) waitHealthy(d time.Duration) error {
	done := n.exited()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(d)
	for {
		resp, err := client.Get(n.healthzURL)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("nats %s exited at start", n.Name)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nats %s not healthy after %v (last: %v)", n.Name, d, err)
		}
	}
}

// Stop stops the node cleanly (SIGTERM; SIGKILL if it lingers).
func (n *NATSNode) Stop() {
	if !n.signal(syscall.SIGTERM, natsStopWait) {
		n.Kill()
	}
}

// Kill kills the node (SIGKILL), as a crash of its machine would end it,
// and waits for it to exit.
func (n *NATSNode) Kill() {
	if !n.signal(syscall.SIGKILL, natsStopWait) {
		n.t.Errorf("nats %s (pid %d) did not exit after SIGKILL", n.Name, n.pid())
	}
}

// Restart starts a stopped or killed node again, with its configuration
// and JetStream store, and waits until it is healthy.
func (n *NATSNode) Restart(t testing.TB) {
	t.Helper()
	n.Stop()
	if err := n.start(); err != nil {
		t.Fatal(err)
	}
	if err := n.waitHealthy(natsStartWait); err != nil {
		t.Fatal(err)
	}
}
