// The time ranges a reader picks (the last 15 minutes ... 24 hours, or a
// custom one), shared by the search and metrics pages.

export const RANGES = { '15m': 900, '1h': 3600, '6h': 6 * 3600, '24h': 86400 };
export const RANGE_WORDS = {
  '15m': 'the last 15 minutes',
  '1h': 'the last hour',
  '6h': 'the last 6 hours',
  '24h': 'the last 24 hours',
};

/** [start, end] in Unix seconds of a state's `range` (and `from`, `to`). */
export function timeWindow(state) {
  if (state.range === 'custom' && state.from && state.to) return [state.from, state.to];
  const now = Math.floor(Date.now() / 1000);
  return [now - (RANGES[state.range] || 3600), now + 1];
}

/** Unix seconds as a datetime-local input's value, in local time. */
export function toLocalInput(seconds) {
  const d = new Date(seconds * 1000);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/** A datetime-local input's value as Unix seconds (0 when empty or bad). */
export function fromLocalInput(value) {
  const t = new Date(value).getTime();
  return Number.isNaN(t) ? 0 : Math.floor(t / 1000);
}
