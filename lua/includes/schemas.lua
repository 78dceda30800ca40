-- The schema registry's version lists (P..'args:schemas:versions': type -> JSON [[version, registered ms],
-- …], ascending; schema-put-1.lua, schema-delete-1.lua).
-- CAPS: Schemas.versions visits a type's versions (at most the registry's max_versions).
local Schemas = {}

-- Schemas.versions(vk, job_type): the type's list, checked; a list that is not one (written by
-- something other than this library) raises an error before the caller's first write (issue 40).
function Schemas.versions(vk, job_type)
  local ok, list = pcall(cjson.decode, redis.call('HGET', vk, job_type) or '[]')
  if not ok or type(list) ~= 'table' then error('ERR schema registry is corrupt: ' .. job_type .. ' has no version list', 0) end
  for i = 1, #list do
    local e = list[i]
    if type(e) ~= 'table' or type(e[1]) ~= 'number' or type(e[2]) ~= 'number' then
      error('ERR schema registry is corrupt: ' .. job_type .. "'s version list holds a bad entry", 0)
    end
  end
  return list
end
