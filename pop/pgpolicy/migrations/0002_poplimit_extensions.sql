-- 0002: what poplimit needs beyond the design's columns. Every added
-- column has a default, so rows written by design-only tools stay valid.
--   algorithm        sliding_window | fixed_window | token_bucket (the tier's main limit)
--   window_precision sliding_window sub-windows (0: two-counter form)
--   on_reject        count | refund
--   scope            the identity counted: comma-separated parts of
--                    ip, api_key, tenant, user, route (default api_key)
--   is_anonymous     this tier serves requests with no or an unknown key
ALTER TABLE rate_limit_policies
  ADD COLUMN IF NOT EXISTS algorithm VARCHAR(20) NOT NULL DEFAULT 'sliding_window',
  ADD COLUMN IF NOT EXISTS window_precision INT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS on_reject VARCHAR(10) NOT NULL DEFAULT 'count',
  ADD COLUMN IF NOT EXISTS scope VARCHAR(100) NOT NULL DEFAULT 'api_key',
  ADD COLUMN IF NOT EXISTS is_anonymous BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE rate_limit_policies ALTER COLUMN created_at SET DEFAULT now();

-- Several limits per tier: every row here is enforced together with the
-- tier's main limit (a compound rule).
CREATE TABLE IF NOT EXISTS rate_limit_policy_limits (
  policy_id UUID NOT NULL REFERENCES rate_limit_policies ON DELETE CASCADE,
  limit_name VARCHAR(50) NOT NULL,
  algorithm VARCHAR(20) NOT NULL DEFAULT 'sliding_window',
  window_seconds INT,
  max_requests INT,
  burst_capacity INT,
  window_precision INT NOT NULL DEFAULT 0,
  on_reject VARCHAR(10) NOT NULL DEFAULT 'count',
  PRIMARY KEY (policy_id, limit_name)
);

-- One row: how keys are read and what an unknown key gets
-- (anonymous: the is_anonymous tier; reject: 401).
CREATE TABLE IF NOT EXISTS poplimit_settings (
  id BOOLEAN PRIMARY KEY DEFAULT true CHECK (id),
  api_key_header VARCHAR(100) NOT NULL DEFAULT 'X-API-Key',
  unknown_key VARCHAR(10) NOT NULL DEFAULT 'anonymous'
);
INSERT INTO poplimit_settings DEFAULT VALUES ON CONFLICT DO NOTHING;
