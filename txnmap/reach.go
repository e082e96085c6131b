package txnmap

import "path"

// Reaches reports whether some valid lease name matches the glob allow
// and is routed to the route whose pattern is pattern: it matches pattern
// and no route listed before it. It is the one answer to "can a client
// allowed allow acquire a lease of this route?" (FM87): a client allowed
// only "orders-1", "orders-eu-*" or "*-7" reaches route "orders-*" as
// much as one allowed "orders-*".
//
// It walks the glob automata of allow, pattern and the earlier routes
// together over the bytes of a lease name, so it is exact for the
// names' alphabet and length; it ignores the partition rule (a route
// with the number rule also needs a trailing number), which can only
// make it say yes where no name would be granted.
func (r *Router) Reaches(allow, pattern string) bool {
	globs := []glob{compileGlob(allow), compileGlob(pattern)}
	for _, rt := range r.routes {
		if rt.Pattern == pattern {
			break
		}
		globs = append(globs, compileGlob(rt.Pattern))
	}
	return reachable(globs)
}

// reachable reports whether a name of 1..MaxNameLen name bytes ends in
// an accepting state of globs[0] and globs[1] and in none of the rest.
func reachable(globs []glob) bool {
	start := make([]stateSet, len(globs))
	for i, g := range globs {
		s := make(stateSet, len(g)+1)
		s[0] = true
		start[i] = g.closure(s)
	}
	seen := map[string]bool{key(start): true}
	frontier := [][]stateSet{start}
	for depth := 0; depth < MaxNameLen && len(frontier) > 0; depth++ {
		var next [][]stateSet
		for _, sets := range frontier {
			for b := 0; b < 256; b++ {
				if !nameByte(byte(b)) {
					continue
				}
				to, alive := step(globs, sets, byte(b))
				if !alive {
					continue
				}
				if accepts(globs, to) {
					return true
				}
				if k := key(to); !seen[k] {
					seen[k] = true
					next = append(next, to)
				}
			}
		}
		frontier = next
	}
	return false
}

// step moves every glob's states on b; alive is false once allow or
// pattern can no longer match.
func step(globs []glob, sets []stateSet, b byte) ([]stateSet, bool) {
	out := make([]stateSet, len(globs))
	for i, g := range globs {
		out[i] = g.step(sets[i], b)
		if i < 2 && !out[i].any() {
			return nil, false
		}
	}
	return out, true
}

func accepts(globs []glob, sets []stateSet) bool {
	for i, g := range globs {
		if sets[i][len(g)] != (i < 2) {
			return false
		}
	}
	return true
}

// key names a tuple of state sets, for the walk's visited set.
func key(sets []stateSet) string {
	var b []byte
	for _, s := range sets {
		for _, in := range s {
			c := byte('0')
			if in {
				c = '1'
			}
			b = append(b, c)
		}
		b = append(b, '|')
	}
	return string(b)
}

// A glob is a pattern split into its tokens; state i means tokens[:i]
// matched. A pattern Match cannot read is one token that accepts
// nothing, as Match matches nothing.
type glob []string

// A stateSet holds, at index i, whether state i is reached.
type stateSet []bool

func (s stateSet) any() bool {
	for _, in := range s {
		if in {
			return true
		}
	}
	return false
}

func compileGlob(pattern string) glob {
	if ValidatePattern(pattern) != nil {
		return glob{"[^\x00-\xff]"}
	}
	var g glob
	for i := 0; i < len(pattern); {
		n := tokenLen(pattern[i:])
		g = append(g, pattern[i:i+n])
		i += n
	}
	return g
}

// tokenLen is the length of the token pattern starts with: a '*', an
// escaped byte, a class up to its closing ']', or one byte.
func tokenLen(p string) int {
	switch p[0] {
	case '\\':
		return 2
	case '[':
		i := 1
		if i < len(p) && p[i] == '^' {
			i++
		}
		for i < len(p) && p[i] != ']' {
			if p[i] == '\\' {
				i++
			}
			i++
		}
		return i + 1
	}
	return 1
}

// closure adds, for every state before a '*', the state after it (a '*'
// matches the empty run).
func (g glob) closure(s stateSet) stateSet {
	for i := 0; i < len(g); i++ {
		if s[i] && g[i] == "*" {
			s[i+1] = true
		}
	}
	return s
}

// step is the states after b from the states s. Match decides each
// non-star token on the one byte, so the classes, '?' and escapes mean
// what they mean to Match.
func (g glob) step(s stateSet, b byte) stateSet {
	out := make(stateSet, len(g)+1)
	for i := range g {
		if !s[i] {
			continue
		}
		if g[i] == "*" {
			if b != '/' {
				out[i] = true
			}
			continue
		}
		if ok, _ := path.Match(g[i], string([]byte{b})); ok {
			out[i+1] = true
		}
	}
	return g.closure(out)
}
