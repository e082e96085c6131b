-- 0010: a prefix watch's catch-up reads only the events under its
-- prefixes (FM91). lease_events_name_id (0001) has the default operator
-- class, which the prefix operators (~>=~, ~<~) cannot use, so the
-- catch-up walked the id index through every tenant's events.
CREATE INDEX lease_events_name_pattern_id ON lease_events (name text_pattern_ops, id);
