package client

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// ErrHolderNotAllowed is the error of a call answered 421 misdirected
// with a holder_url the SDK will not send the token to: another scheme
// than BaseURL's, or a host Config.HolderHosts does not permit. The SDK
// treats it as a failed call (retried at BaseURL after a backoff); nothing
// was sent to the holder.
var ErrHolderNotAllowed = errors.New("fencegate: holder_url not allowed")

// holderPolicy says where a 421 may send the lease's requests, and with
// them the bearer token (FM42).
type holderPolicy struct {
	scheme   string
	host     string          // BaseURL's host name or IP, lower case
	hosts    map[string]bool // host names allowed exactly
	suffixes []string        // ".example.com": any host name under it
	nets     []netip.Prefix  // IP literals allowed
}

// newHolderPolicy builds the policy of base and the HolderHosts entries
// (nil: the default of Config.HolderHosts).
func newHolderPolicy(base string, entries []string) (*holderPolicy, error) {
	u, err := parseBaseURL(base)
	if err != nil {
		return nil, err
	}
	p := &holderPolicy{scheme: u.Scheme, host: hostOf(u), hosts: map[string]bool{}}
	p.allowEntry(p.host)
	if entries == nil {
		if _, err := netip.ParseAddr(p.host); err != nil {
			if labels := strings.Split(p.host, "."); len(labels) >= 3 {
				p.suffixes = append(p.suffixes, "."+strings.Join(labels[1:], "."))
			}
		}
		return p, nil
	}
	for _, e := range entries {
		if err := p.allowEntry(strings.TrimSuffix(strings.ToLower(strings.TrimSpace(e)), ".")); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// parseBaseURL accepts Config.BaseURL: an http:// or https:// URL with a
// host and at most a path. Anything else would fail every request, and
// Acquire would retry it until its context ends.
func parseBaseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	reason := ""
	switch {
	case !strings.Contains(raw, "://"):
		reason = fmt.Sprintf("has no scheme (write http://%s or https://%s)", raw, raw)
	case err != nil:
		reason = "does not parse: " + strings.TrimPrefix(err.Error(), "parse "+strconv.Quote(raw)+": ")
	case u.Scheme != "http" && u.Scheme != "https":
		reason = "has scheme " + u.Scheme + ", not http or https"
	case u.Hostname() == "":
		reason = "has no host"
	case u.User != nil:
		reason = "carries user information (the Token authenticates)"
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		reason = "carries a query or a fragment"
	default:
		return u, nil
	}
	return nil, fmt.Errorf("fencegate: BaseURL %q %s", raw, reason)
}

func (p *holderPolicy) allowEntry(e string) error {
	if pre, err := netip.ParsePrefix(e); err == nil {
		p.nets = append(p.nets, pre.Masked())
		return nil
	}
	if ip, err := netip.ParseAddr(e); err == nil {
		p.nets = append(p.nets, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
		return nil
	}
	switch {
	case e == "" || strings.ContainsAny(e, "/:*@ "):
		return fmt.Errorf("fencegate: HolderHosts entry %q is not a host name, a .domain, an IP address or a CIDR prefix", e)
	case strings.HasPrefix(e, "."):
		if strings.Count(e, ".") < 2 {
			return fmt.Errorf("fencegate: HolderHosts entry %q would allow a whole top-level domain", e)
		}
		p.suffixes = append(p.suffixes, e)
	default:
		p.hosts[e] = true
	}
	return nil
}

// hostOf is u's host without port, brackets or a trailing dot, lower case.
func hostOf(u *url.URL) string {
	return strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
}

// allow returns nil when requests may follow a 421 to raw, else an error
// matching ErrHolderNotAllowed that says why.
func (p *holderPolicy) allow(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "":
		return fmt.Errorf("%w: %q is not a URL with a host", ErrHolderNotAllowed, raw)
	case u.Scheme != p.scheme:
		return fmt.Errorf("%w: %q is %s, BaseURL is %s; the token is only sent over the base URL's scheme", ErrHolderNotAllowed, raw, u.Scheme, p.scheme)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%w: %q carries user information, a query or a fragment", ErrHolderNotAllowed, raw)
	}
	host := hostOf(u)
	if ip, err := netip.ParseAddr(host); err == nil {
		for _, n := range p.nets {
			if n.Contains(ip.Unmap()) {
				return nil
			}
		}
		return fmt.Errorf("%w: host %s of %q is not allowed (Config.HolderHosts)", ErrHolderNotAllowed, host, raw)
	}
	if p.hosts[host] {
		return nil
	}
	for _, s := range p.suffixes {
		if strings.HasSuffix(host, s) {
			return nil
		}
	}
	return fmt.Errorf("%w: host %s of %q is not allowed (Config.HolderHosts)", ErrHolderNotAllowed, host, raw)
}
