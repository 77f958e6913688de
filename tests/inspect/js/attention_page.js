// Runs the inline script of an attention page (t2t_jax/inspect/attention_html.py) under node with a
// minimal DOM, flips through kinds, layers and heads, and prints what the page shows as JSON.
// Usage: node attention_page.js PAGE.html
const fs = require('fs');
const page = fs.readFileSync(process.argv[2], 'utf8');
const data = page.match(/<script type="application\/json" id="attention-data">([\s\S]*?)<\/script>/)[1];
const script = page.match(/<script>([\s\S]*?)<\/script>/)[1];

function element(tag) {
  return {
    tag, children: [], style: {}, options: [], selectedIndex: -1, text: '',
    set textContent(value) { this.text = value; this.children = []; },
    get textContent() { return this.text; },
    appendChild(child) { this.children.push(child); return child; },
    insertRow() { return this.appendChild(element('tr')); },
    insertCell() { return this.appendChild(element('td')); },
    add(option) { this.options.push(option); if (this.selectedIndex < 0) this.selectedIndex = 0; },
    set length(n) { this.options.length = n; if (n === 0) this.selectedIndex = -1; },
    get length() { return this.options.length; },
    get value() { return String(this.options[this.selectedIndex].value); },
  };
}

const ids = {'attention-data': {textContent: data}, kind: element('select'),
             layer: element('select'), head: element('select'), map: element('table'),
             hover: element('div'), caption: element('p')};
let onKey = null;
global.document = {getElementById: (id) => ids[id], createElement: element,
                   addEventListener: (type, handler) => { onKey = handler; }};
global.Option = function (text, value) { this.text = text; this.value = value; };
global.atob = (s) => Buffer.from(s, 'base64').toString('binary');
eval(script);

function shown() {
  const table = ids.map.children;
  table[1].children[1].onmouseenter();  // first query row, first key
  return {caption: ids.caption.textContent, hover: ids.hover.textContent,
          columns: table[0].children.slice(1).map((th) => th.textContent),
          rows: table.slice(1).map((tr) => tr.children[0].textContent),
          shade: table[1].children[1].style.background};
}

const views = [shown()];
for (const key of ['ArrowRight', 'ArrowDown', 'k', 'k']) {
  onKey({key, target: {tagName: 'BODY'}, preventDefault() {}});
  views.push(shown());
}
console.log(JSON.stringify(views));
