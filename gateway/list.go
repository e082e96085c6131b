package gateway

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

// MaxListPage is the most leases one GET /v1/leases answers, and its
// default page size (?limit=).
const MaxListPage = 1000

// listScans bounds the store queries that read rows in one listing: a
// client whose patterns match few of the names under their literal
// prefixes (shard:*x) gets a short page and a next cursor instead of a
// scan of the table.
const listScans = 8

// listQuery is a listing request: names under prefix, after the cursor
// after, at most limit of them.
type listQuery struct {
	prefix, after string
	limit         int
}

// listQueryOf reads ?prefix=&after=&limit=: a prefix or cursor no name
// can hold is 400, before any query (Postgres refused them: 503 and an
// ERROR line, from any client). limit holds the values of ?limit= (nil:
// absent); one given empty is not an integer either.
func listQueryOf(prefix, after string, limit []string) (listQuery, *Error) {
	if err := leasestore.CheckListArgs(prefix, after); err != nil {
		return listQuery{}, errorf(CodeInvalidRequest, "%v", err)
	}
	q := listQuery{prefix: prefix, after: after, limit: MaxListPage}
	if limit != nil {
		n, err := strconv.Atoi(limit[0])
		if err != nil || n < 1 || n > MaxListPage {
			return listQuery{}, errorf(CodeInvalidRequest, "limit must be an integer from 1 to %d", MaxListPage)
		}
		q.limit = n
	}
	return q, nil
}

// listRanges are the name prefixes that a listing under prefix scans for a
// client allowed patterns: for each pattern, the longer of prefix and the
// pattern's literal prefix when one starts with the other (else the
// pattern allows nothing under prefix), in byte order, none under
// another. Their scans, one after the other, are the listing in name
// order; txnmap.Match, the one matcher, still decides each name.
func listRanges(patterns []string, prefix string) []string {
	var rs []string
	for _, p := range patterns {
		switch lit := txnmap.LiteralPrefix(p); {
		case strings.HasPrefix(lit, prefix):
			rs = append(rs, lit)
		case strings.HasPrefix(prefix, lit):
			rs = append(rs, prefix)
		}
	}
	slices.Sort(rs)
	out := rs[:0]
	for _, r := range rs {
		if len(out) == 0 || !strings.HasPrefix(r, out[len(out)-1]) {
			out = append(out, r)
		}
	}
	return out
}

// list returns a page of the leases that cl may take under q, in name
// order, and the cursor of the next page ("" when none follows). Each
// store query is bounded (a page, within the client's ranges); a page may
// be short, even empty, while next is set, when listScans queries found
// too few of the client's leases.
func (g *Gateway) list(ctx context.Context, cl *Client, q listQuery) ([]leasestore.Lease, string, error) {
	ranges := listRanges(cl.Allow, q.prefix)
	page := max(q.limit, 100)
	var out []leasestore.Lease
	last, scans := "", 0 // the last name read; the queries that read rows
	for ri, r := range ranges {
		cursor := q.after
		for {
			// Only queries that read rows count: the empty ones are one
			// per configured pattern at most, and resuming needs a name.
			if scans == listScans {
				return out, last, nil
			}
			ls, err := g.store.List(ctx, r, cursor, page)
			if err != nil {
				return nil, "", err
			}
			// Only an empty page ends a range: the store may cap a page
			// below what was asked (leasestore.Config.ListLimit).
			if len(ls) == 0 {
				break
			}
			scans++
			for i, l := range ls {
				cursor, last = l.Name, l.Name
				if cl.authorize(l.Name) != nil {
					continue
				}
				if out = append(out, l); len(out) == q.limit {
					if more := i < len(ls)-1 || len(ls) == page || ri < len(ranges)-1; !more {
						return out, "", nil
					}
					return out, l.Name, nil
				}
			}
		}
	}
	return out, "", nil
}
