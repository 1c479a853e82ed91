// Read credentials for a saltdb that requires them (--read-token, --read-basic-auth-file): asked
// for when the API answers 401, kept for this browser tab (sessionStorage), and sent by api.js
// as the Authorization header of every request. The pages themselves hold no data and load
// without credentials.
import { h } from './dom.js';

const KEY = 'saltdb.authorization';

// The Authorization header value to send, or null.
export function authorization() {
  return sessionStorage.getItem(KEY);
}

// Drops the stored credentials (they were refused).
export function forgetCredentials() {
  sessionStorage.removeItem(KEY);
}

let pending = null;

// Shows the sign-in form (once, however many requests wait for it) with `message`, and resolves
// when the user submits it.
export function askCredentials(message) {
  if (pending) return pending;
  pending = new Promise((resolve) => {
    const token = h('input', { id: 'auth-token', type: 'password', autocomplete: 'off', spellcheck: 'false' });
    const user = h('input', { id: 'auth-user', autocomplete: 'username', spellcheck: 'false' });
    const password = h('input', { id: 'auth-password', type: 'password', autocomplete: 'current-password' });
    const form = h(
      'form',
      { id: 'credentials', class: 'credentials', role: 'dialog', 'aria-labelledby': 'credentials-title' },
      h('h2', { id: 'credentials-title' }, 'Sign in to read'),
      h('p', {}, message),
      h('label', {}, 'Bearer token', token),
      h('p', { class: 'or' }, 'or basic auth'),
      h('label', {}, 'User', user),
      h('label', {}, 'Password', password),
      h('button', { type: 'submit' }, 'Sign in'),
    );
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const secret = token.value.trim();
      const basic = () => btoa(String.fromCharCode(...new TextEncoder().encode(`${user.value}:${password.value}`)));
      sessionStorage.setItem(KEY, secret ? `Bearer ${secret}` : `Basic ${basic()}`);
      form.remove();
      pending = null;
      resolve();
    });
    document.body.prepend(form);
    token.focus();
  });
  return pending;
}
