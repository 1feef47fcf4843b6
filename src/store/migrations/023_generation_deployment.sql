-- The vendor deployment (its configured name, docs/vendor-pools.md) that created a generation's
-- vendor task: a video's polls and its download go to that deployment only, since another region or
-- account does not know the task. An image records the deployment that made it. Null on rows from
-- before pooled jobs (they use the vendor's first deployment) and while no vendor task exists.
-- Names from the environment are hosts (an IPv6 one has brackets), hence a length bound only.
ALTER TABLE generations ADD COLUMN IF NOT EXISTS vendor_deployment text
  CONSTRAINT generations_vendor_deployment_check CHECK (char_length(vendor_deployment) BETWEEN 1 AND 300);
