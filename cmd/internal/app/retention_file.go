package app

import (
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/deliveryledger/ledger/retention"
)

// retention reads the retention block: `retention: {keep: 30d, payloads: 7d, partition: 1d,
// archive_dir: DIR, tenants: {t1: {keep: 90d}}}`.
func (p *fileParser) retention(n *yaml.Node) retention.Config {
	var c retention.Config
	for _, kv := range p.mapping(n, "retention") {
		field := "retention." + kv.key
		switch kv.key {
		case "keep":
			c.Keep = p.longDuration(kv.value, field)
		case "payloads":
			c.Payloads = p.longDuration(kv.value, field)
		case "partition":
			c.Partition = p.longDuration(kv.value, field)
		case "archive_dir":
			c.ArchiveDir = p.str(kv.value, field)
		case "tenants":
			c.Tenants = map[string]retention.TenantPolicy{}
			for _, tkv := range p.mapping(kv.value, field) {
				var tp retention.TenantPolicy
				tfield := field + "." + tkv.key
				for _, pkv := range p.mapping(tkv.value, tfield) {
					switch pkv.key {
					case "keep":
						tp.Keep = p.longDuration(pkv.value, tfield+".keep")
					case "payloads":
						tp.Payloads = p.longDuration(pkv.value, tfield+".payloads")
					default:
						p.unknown(pkv.keyNode, tfield+"."+pkv.key, "keep, payloads")
					}
				}
				c.Tenants[tkv.key] = tp
			}
		default:
			p.unknown(kv.keyNode, field, "keep, payloads, partition, archive_dir, tenants")
		}
	}
	if err := c.Validate(); err != nil {
		p.fail(n, "retention", "%v", err)
	}
	return c
}

// longDuration is a positive duration that may be given in days (30d).
func (p *fileParser) longDuration(n *yaml.Node, field string) time.Duration {
	s := p.str(n, field)
	d, err := retention.ParseDuration(s)
	switch {
	case err != nil && n.Kind == yaml.ScalarNode:
		p.fail(n, field, "want a duration such as 30d, 36h or 90s, got %q", s)
	case err == nil && d <= 0:
		p.fail(n, field, "must be positive, got %s", s)
	}
	return d
}
