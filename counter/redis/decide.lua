-- poplimit: one atomic decision of one identity over m limits (a compound
-- rule; m = 1 for a single limit). KEYS[i] is limit i's identity key; the
-- store keys built here extend it after its hash tag, so they live in its
-- slot (and Redis Cluster refuses KEYS of different slots: CROSSSLOT).
--
-- ARGV[1], ARGV[2]: now as unix seconds and nanoseconds within the second;
-- ARGV[1] == "-" takes now from redis.call('TIME') (the shard's clock).
-- ARGV[3]: m. Then 9 fields per limit:
--   alg ("s" sliding, "f" fixed, "b" bucket), suffix, units n (0: read
--   only, counter.Peeker's answer),
--   refund ("1"; "0" Count; "2" CountFirst), undo ("1": give n back, nothing decided), then
--   windows: quantity, sub-window ms, sub-windows per window (0 fixed),
--            item TTL ms;
--   bucket:  interval ns, tolerance ns, burst, unused.
-- Reply: {[now sec, now ns: only when taken from TIME], then per limit
-- allowed (1/0), then its values: the sub-window counts oldest first
-- (windows), or tat − now in ns (bucket)}. A short reply is cheaper: each
-- value costs the shard a Lua-to-RESP conversion.
--
-- Every limit is decided first without writing; then a Count-mode limit
-- is charged whatever the outcome (CountFirst: unless it refused while
-- already over), and a Refund-mode one only when the
-- whole rule admits (AllowAll's semantics, with no undo needed).

local sec, nsec
if ARGV[1] == "-" then
  local t = redis.call('TIME')
  sec, nsec = tonumber(t[1]), tonumber(t[2]) * 1000
else
  sec, nsec = tonumber(ARGV[1]), tonumber(ARGV[2])
end
local now_ms = sec * 1000 + math.floor(nsec / 1000000)

local DIG = "0123456789abcdefghijklmnopqrstuvwxyz"
local function b36(x)
  if x == 0 then return "0" end
  local neg = x < 0
  if neg then x = -x end
  local s = ""
  while x > 0 do
    local d = x % 36
    s = string.sub(DIG, d + 1, d + 1) .. s
    x = (x - d) / 36
  end
  if neg then s = "-" .. s end
  return s
end

-- satsum is the sum of c[from..to], saturated at q + 1.
local function satsum(c, from, to, q)
  local s = 0
  for i = from, to do
    s = s + c[i]
    if s > q then return q + 1 end
  end
  return s
end

-- tat_rel reads a decimal unix-ns tat as tat − now, exactly (the digits are
-- split at the seconds so no double holds a full unix-ns value).
local function tat_rel(v)
  if not v then return 0, false end
  local hi, lo = 0, tonumber(v)
  if #v > 9 then
    hi, lo = tonumber(string.sub(v, 1, -10)), tonumber(string.sub(v, -9))
  end
  return (hi - sec) * 1000000000 + (lo - nsec), true
end

-- tat_abs formats now + d as decimal unix ns.
local function tat_abs(d)
  local total = nsec + d
  local carry = math.floor(total / 1000000000)
  return string.format("%d%09d", sec + carry, total - carry * 1000000000)
end

local m = tonumber(ARGV[3])
local plan = {}
local all = true
for i = 1, m do
  local o = 3 + (i - 1) * 9
  local p = {alg = ARGV[o + 1], suffix = ARGV[o + 2], n = tonumber(ARGV[o + 3]),
    refund = ARGV[o + 4] == "1", first = ARGV[o + 4] == "2", undo = ARGV[o + 5] == "1"}
  local id_key = KEYS[i]
  local a, b, c, d = tonumber(ARGV[o + 6]), tonumber(ARGV[o + 7]), tonumber(ARGV[o + 8]), tonumber(ARGV[o + 9])
  if p.alg == "b" then
    p.key = id_key .. p.suffix
    -- The item is "tat last": last is the latest now the bucket decided at
    -- (absent in items written before it carried one). A now older than
    -- last is decided at last: workers' calls reach the shard out of their
    -- nows' order, and GCRA at an earlier now refuses the last token a
    -- moment too full. p.tat, p.next are relative to that clock; p.shift
    -- is its distance from now.
    local v = redis.call('GET', p.key)
    local last
    if v then
      local sp = string.find(v, " ", 1, true)
      if sp then v, last = string.sub(v, 1, sp - 1), string.sub(v, sp + 1) end
    end
    p.shift = 0
    if last then p.shift = math.max(tat_rel(last), 0) end
    local rel, found = tat_rel(v)
    p.tat, p.found = rel - p.shift, found
    local t, tau, burst = a, b, c
    if p.undo then
      p.next = p.tat
      if p.tat > 0 then p.next = math.max(p.tat - p.n * t, 0) end
      p.allowed = true
    elseif p.n == 0 then
      -- A read: allowed when one unit is available; nothing written.
      p.next, p.allowed = p.tat, math.max(p.tat, 0) + t <= tau
    elseif p.n > burst then
      p.next, p.allowed = p.tat, false
    else
      local nxt = math.max(p.tat, 0) + p.n * t
      if nxt <= tau then
        p.next, p.allowed = nxt, true
      elseif not p.refund and (not p.first or p.tat <= tau) then
        -- CountFirst: charged only while not in debt already
        p.next, p.allowed = math.max(p.tat, math.min(nxt, 2 * tau)), false
      else
        p.next, p.allowed = p.tat, false
      end
    end
  else
    local q, sub, nw, ttl = a, b, c, d
    local id = math.floor(now_ms / sub)
    local e = now_ms - id * sub
    p.q, p.ttl = q, ttl
    p.cur_key = id_key .. p.suffix .. b36(id)
    local counts = {}
    for j = 0, nw - 1 do
      counts[j + 1] = tonumber(redis.call('GET', id_key .. p.suffix .. b36(id - nw + j))) or 0
    end
    -- A Count-mode limit is charged whatever the outcome: INCRBY at once
    -- (the count before is the reply minus n) instead of GET now and
    -- INCRBY below, one call fewer.
    p.early = not p.refund and not p.undo and p.n > 0 and p.n <= q
    local cur
    if p.early then
      local v = redis.call('INCRBY', p.cur_key, p.n)
      if v == p.n then redis.call('PEXPIRE', p.cur_key, ttl) end
      cur = v - p.n
    else
      cur = tonumber(redis.call('GET', p.cur_key)) or 0
    end
    counts[nw + 1] = cur
    p.counts, p.nw = counts, nw
    if p.undo then
      p.allowed = true
    elseif p.n > q then
      p.allowed = false -- never admitted, never counted
      p.peek = true
    else
      counts[nw + 1] = cur + p.n
      if nw == 0 then
        p.allowed = satsum(counts, 1, 1, q) <= q
      else
        local full = satsum(counts, 2, nw + 1, q)
        p.allowed = full <= q and counts[1] * (sub - e) <= (q - full) * sub
      end
      counts[nw + 1] = cur
      -- n = 0 is a read: within the limit or not, nothing to charge.
      p.peek = p.n == 0
      if p.early and p.first and not p.allowed and nw > 0 then
        -- CountFirst: a sliding window charges a rejection only while the
        -- estimate without it is not over q.
        local full = satsum(counts, 2, nw + 1, q)
        if full > q or counts[1] * (sub - e) > (q - full) * sub then
          redis.call('DECRBY', p.cur_key, p.n)
          p.free = true
        end
      end
    end
  end
  all = all and p.allowed
  plan[i] = p
end

-- The reply carries now only when it came from the shard's clock (the
-- worker knows its own).
local out = {}
if ARGV[1] == "-" then out = {sec, nsec} end
for i = 1, m do
  local p = plan[i]
  local charge = p.undo or (p.allowed and all) or not p.refund
  out[#out + 1] = p.allowed and 1 or 0
  if p.alg == "b" then
    if charge and p.next ~= p.tat and (p.found or p.next > 0) then
      if p.next <= 0 then
        redis.call('DEL', p.key)
      else
        redis.call('SET', p.key, tat_abs(p.next + p.shift) .. " " .. tat_abs(p.shift), 'PX',
          math.floor(p.next / 1000000) + 1000)
      end
    end
    out[#out + 1] = p.next + p.shift -- what the limit decided, charged or not, from now
  else
    local cur = p.counts[p.nw + 1]
    if p.undo then
      if cur > 0 then
        redis.call('SET', p.cur_key, tostring(math.max(cur - p.n, 0)), 'KEEPTTL')
        p.counts[p.nw + 1] = math.max(cur - p.n, 0)
      end
    elseif not p.peek and not p.free and (p.allowed or not p.refund) then
      -- the counts the limit decided on, charged or not
      p.counts[p.nw + 1] = cur + p.n
      if charge and not p.early then
        local v = redis.call('INCRBY', p.cur_key, p.n)
        if v == p.n then redis.call('PEXPIRE', p.cur_key, p.ttl) end
        p.counts[p.nw + 1] = v
      end
    end
    for j = 1, p.nw + 1 do out[#out + 1] = p.counts[j] end
  end
end
return out
