// The saltdb/Prometheus HTTP API as the pages use it: GET with repeated parameters, the
// {"status","data","warnings"} envelope unwrapped, failures turned into ApiError; a 401 asks
// for read credentials (credentials.js) and retries. The tenant picked (tenant.js) goes with
// every request.
import { askCredentials, authorization, forgetCredentials } from './credentials.js';
import { tenant } from './tenant.js';

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
  let resp = await send(url);
  // Refused credentials are dropped and asked for again (a few times, then the 401 shows).
  for (let tries = 0; resp.status === 401 && tries < 3; tries++) {
    const refusal = await resp.json().catch(() => ({}));
    forgetCredentials();
    await askCredentials(refusal.error || 'saltdb needs read credentials.');
    resp = await send(url);
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

async function send(url) {
  const headers = { Accept: 'application/json' };
  const auth = authorization();
  if (auth) headers.Authorization = auth;
  const named = tenant();
  if (named) headers['X-Scope-OrgID'] = named;
  try {
    return await fetch(url, { headers });
  } catch (e) {
    throw new ApiError(0, 'network', `cannot reach saltdb: ${e.message}`);
  }
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
