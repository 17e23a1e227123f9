-- 0001: the design's schema (DESIGN.md, "Tier 4"), columns exactly as designed.
-- client_api_keys.api_key holds the lower-case hex SHA-256 digest of the
-- key (64 characters, the column's VARCHAR(64)), never the key in clear.
-- Importing existing clear keys (once, in one transaction):
--   UPDATE client_api_keys SET api_key = encode(sha256(convert_to(api_key, 'UTF8')), 'hex')
--     WHERE api_key !~ '^[0-9a-f]{64}$';
-- (a clear key that is itself 64 lower-case hex characters must be
-- digested by hand: `popctl key import` does it from a file).
CREATE TABLE IF NOT EXISTS rate_limit_policies (
  policy_id UUID PRIMARY KEY,
  tier_name VARCHAR(50) UNIQUE,
  route_pattern VARCHAR(255),
  window_seconds INT,
  max_requests INT,
  burst_capacity INT,
  fail_mode VARCHAR(10),
  created_at TIMESTAMPTZ
);
CREATE TABLE IF NOT EXISTS client_api_keys (
  api_key VARCHAR(64) PRIMARY KEY,
  tenant_id UUID,
  policy_id UUID REFERENCES rate_limit_policies,
  is_active BOOLEAN
);
