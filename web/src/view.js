// Each render gets a `view` whose `alive()` turns false when the user leaves; its `cleanup`
// callbacks (timers, streams) run then.

let current = null;

export function newView() {
  if (current) {
    current.dead = true;
    for (const f of current.cleanup) { try { f(); } catch (_) { /* leaving anyway */ } }
  }
  current = { dead: false, cleanup: [] };
  const view = current;
  view.alive = () => !view.dead;
  view.onLeave = (f) => view.cleanup.push(f);
  // Calls `f` now and then every `ms` after each call finished, until it returns false or the
  // view goes.
  view.every = (ms, f) => {
    let timer = 0;
    const tick = async () => {
      if (!view.alive()) return;
      let again = true;
      try { again = (await f()) !== false; } catch (_) { /* shown by f */ }
      if (again && view.alive()) timer = setTimeout(tick, ms);
    };
    view.onLeave(() => clearTimeout(timer));
    tick();
  };
  // Calls `f(first)` now and again as soon as each call finished, until it returns false or
  // the view goes; `f` waits for what it follows (a long-poll). After a failure (the server
  // away) the next call comes a little later.
  view.follow = (f) => {
    let timer = 0;
    const next = async (first) => {
      if (!view.alive()) return;
      let again = true, failed = false;
      try { again = (await f(first)) !== false; } catch (e) {
        if (e && e.name === "AbortError") return;
        failed = true;
        if (e && e.status === 404) again = false;
      }
      if (!again || !view.alive()) return;
      if (failed) timer = setTimeout(() => next(false), 2000);
      else next(false);
    };
    view.onLeave(() => clearTimeout(timer));
    next(true);
  };
  return view;
}
