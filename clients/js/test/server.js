// What the tests that need a running canopy share: where it is, who to be, polling with a deadline,
// and the Python client (tests/e2e/js_harness.py) for the other side of the both-ways tests.
// tests/e2e/test_js_client.py starts the server and sets the environment; without it these tests skip.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

const run = promisify(execFile);

export const URL = process.env.CANOPY_URL;
export const ADMIN = { principal: process.env.CANOPY_PRINCIPAL, password: process.env.CANOPY_PASSWORD };
export const skip = URL ? false : 'CANOPY_URL is not set: run through tests/e2e/test_js_client.py (make test)';

let counter = 0;
/** A topic path prefix no other test uses. */
export function unique(name) {
  counter += 1;
  return `js/${name}-${process.pid}-${counter}`;
}

/** Poll `condition` until it holds or `seconds` pass; then fail with the last observation. */
export async function until(condition, seconds, what, describe = () => '') {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    if (await condition()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${seconds} s waiting for ${what}; last seen: ${describe()}`);
    await new Promise((r) => { setTimeout(r, 20); });
  }
}

/** Run a command of tests/e2e/js_harness.py (the Python client); its stdout. */
export async function python(...args) {
  const { stdout } = await run(process.env.CANOPY_PYTHON, ['-m', 'tests.e2e.js_harness', ...args], {
    cwd: process.env.CANOPY_REPO, timeout: 60_000,
  });
  return stdout;
}
