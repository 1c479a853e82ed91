// The saltdb/Prometheus HTTP API as the pages use it: GET with repeated parameters, the
// {"status","data","warnings"} envelope unwrapped, failures turned into ApiError.

export class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

// GETs `path` with `params` (an object; array values repeat the key, undefined/'' are left out)
// and resolves to {data, warnings, infos}.
export async function api(path, params = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params)) {
    for (const one of Array.isArray(v) ? v : [v]) {
      if (one !== undefined && one !== null && one !== '') url.searchParams.append(k, String(one));
    }
  }
  let resp;
  try {
    resp = await fetch(url, { headers: { Accept: 'application/json' } });
  } catch (e) {
    throw new ApiError(0, 'network', `cannot reach saltdb: ${e.message}`);
  }
  let body;
  try {
    body = await resp.json();
  } catch {
    throw new ApiError(resp.status, 'bad_response', `HTTP ${resp.status}: the answer is not JSON`);
  }
  if (body.status !== 'success') {
    throw new ApiError(resp.status, body.errorType || 'unknown', body.error || `HTTP ${resp.status}`);
  }
  return { data: body.data, warnings: body.warnings || [], infos: body.infos || [] };
}

// Memoizes GETs whose answers change slowly (metric and label names for autocomplete).
const cache = new Map();
export function cachedApi(path, params = {}) {
  const key = path + '?' + JSON.stringify(params);
  if (!cache.has(key)) {
    const p = api(path, params).catch((e) => {
      cache.delete(key);
      throw e;
    });
    cache.set(key, p);
  }
  return cache.get(key);
}
