-- 0003: change push. Every table notifies channel poplimit_policy after
-- each change. client_api_keys notifies per row with the digest(s)
-- touched, so workers re-read only those keys; the other tables notify per
-- statement and workers re-read the tiers.
CREATE OR REPLACE FUNCTION poplimit_notify_statement() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('poplimit_policy', json_build_object('table', TG_TABLE_NAME)::text);
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION poplimit_notify_key() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE keys text[];
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN keys := array_append(keys, OLD.api_key::text); END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN keys := array_append(keys, NEW.api_key::text); END IF;
  PERFORM pg_notify('poplimit_policy', json_build_object('table', TG_TABLE_NAME, 'keys', keys)::text);
  RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS poplimit_notify ON rate_limit_policies;
CREATE TRIGGER poplimit_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON rate_limit_policies
  FOR EACH STATEMENT EXECUTE FUNCTION poplimit_notify_statement();
DROP TRIGGER IF EXISTS poplimit_notify ON rate_limit_policy_limits;
CREATE TRIGGER poplimit_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON rate_limit_policy_limits
  FOR EACH STATEMENT EXECUTE FUNCTION poplimit_notify_statement();
DROP TRIGGER IF EXISTS poplimit_notify ON poplimit_settings;
CREATE TRIGGER poplimit_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON poplimit_settings
  FOR EACH STATEMENT EXECUTE FUNCTION poplimit_notify_statement();
DROP TRIGGER IF EXISTS poplimit_notify ON client_api_keys;
CREATE TRIGGER poplimit_notify AFTER INSERT OR UPDATE OR DELETE ON client_api_keys
  FOR EACH ROW EXECUTE FUNCTION poplimit_notify_key();
DROP TRIGGER IF EXISTS poplimit_notify_truncate ON client_api_keys;
CREATE TRIGGER poplimit_notify_truncate AFTER TRUNCATE ON client_api_keys
  FOR EACH STATEMENT EXECUTE FUNCTION poplimit_notify_statement();
