-- Decision retention: the gateway's sweep deletes records by age and keeps
-- each sandbox's newest N, but never a denial a proposal names.

-- +goose Up

-- Records by when they were received (the age bound).
CREATE INDEX decisions_received_at_idx ON decisions (received_at);
-- Is this denial named by a proposal of its sandbox? (Asked for every
-- record the sweep would delete.)
CREATE INDEX proposals_denial_id_idx ON proposals (sandbox, denial_id);

-- +goose Down
DROP INDEX proposals_denial_id_idx;
DROP INDEX decisions_received_at_idx;
