// Helpers every view shares. Everything an agent or a user wrote reaches
// the page as text (textContent, text nodes), never as HTML: no element is
// made from a string, so an answer holding <script> or <img onerror> shows
// as what it is. The one exception is renderMarkdown below: HTML kdd
// rendered and sanitised (thread.render), straight from its answer.

// An element with attributes and children (strings become text nodes).
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('data-')) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

export function ago(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

export function failure(parent, e) {
  parent.append(el('p', { class: 'error', role: 'alert' }, `kdd said: ${e.message}`));
}


// Members' answers as formatted text: kdd renders messages `seqs` of
// `thread` from markdown to sanitised HTML (thread.render: pulldown-cmark
// and ammonia; no script, event handler, image or javascript: link) and
// each lands in `nodes.get(seq)`. The only place the page inserts HTML,
// and only kdd's rendered answer, never a string from elsewhere; the
// Content-Security-Policy (no inline script) stands behind it.
export async function renderMarkdown(rpc, thread, seqs, nodes) {
  for (let i = 0; i < seqs.length; i += 100) {
    const rendered = await rpc.call('thread.render', { thread, seqs: seqs.slice(i, i + 100) });
    for (const r of rendered) {
      const node = nodes.get(r.seq);
      if (!node || typeof r.html !== 'string') continue;
      node.innerHTML = r.html;
      node.classList.add('markdown');
    }
  }
}

// Dollars, as cost.report gives them.
export function usd(n) {
  if (!n) return '';
  return n < 0.01 ? '<$0.01' : `$${n.toFixed(2)}`;
}
