package status

import "time"

// Member is one node as the admin API shows it.
type Member struct {
	Name  string `json:"name"`
	Addr  string `json:"addr"`
	State string `json:"state"`
	// ConfigVersion is the version of the config file the member runs
	// (config.Config.Fingerprint), as it gossips it; "" when it says none.
	ConfigVersion string `json:"config_version,omitempty"`
	// CannotReachSelf: the member says it cannot reach this node over
	// HTTP and admits fallback shares of the tenants this node owns.
	CannotReachSelf bool `json:"cannot_reach_self,omitempty"`
}

// Cluster is /cluster: this node, its ring's version, its last reload and
// the members.
type Cluster struct {
	Self          string `json:"self"`
	RingVersion   uint64 `json:"ring_version"`
	ConfigVersion string `json:"config_version,omitempty"` // this node's
	// ConfigsDiffer: members run config files of different versions
	// (a rolling reload half done, or a node left behind).
	ConfigsDiffer bool     `json:"configs_differ"`
	LastReload    *Reload  `json:"last_reload,omitempty"`
	Members       []Member `json:"members"`
}

// Reload is the outcome of a reload of the config from its source
// (its file, its flags): SIGHUP or POST /admin/reload.
type Reload struct {
	At      time.Time `json:"at"`
	Trigger string    `json:"trigger"` // "sighup" or "admin"
	OK      bool      `json:"ok"`
	// Error is why the new config was refused (the old one runs on).
	Error string `json:"error,omitempty"`
	// ConfigVersion is the version running after it.
	ConfigVersion string `json:"config_version,omitempty"`
	// RestartRequired names the tables the new file changed that a
	// reload does not apply (node, cluster, redis): they keep their old
	// values until a restart.
	RestartRequired []string `json:"restart_required,omitempty"`
}
