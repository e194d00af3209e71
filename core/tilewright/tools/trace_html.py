"""The self-contained HTML report of the lower trace.

The file is written as a header (styles and the viewer script) followed by one
``<script type="application/json" class="tw-rec">`` block per record, appended as passes run,
and a final ``tw-end`` block. Each record block carries only the texts not seen before (the
IR after one pass is usually the IR before the next), so the report stays small and writing it
costs O(total text). The viewer builds everything when the page has loaded, so a report cut
short by a crash still opens and shows the passes that ran.
"""

from __future__ import annotations

import html
import json


def _json(data) -> str:
    # "</" would end the script element early
    return json.dumps(data, separators=(",", ":")).replace("</", "<\\/")


def header(title: str, meta: dict) -> str:
    return (_PAGE.replace("@TITLE@", html.escape(title))
            .replace("@META@", _json(meta)))


def record_block(rec: dict, new_texts: dict) -> str:
    return (f'<script type="application/json" class="tw-rec">'
            f'{_json({"texts": {str(k): v for k, v in new_texts.items()}, "rec": rec})}'
            f'</script>\n')


def end_block(summary: dict) -> str:
    return f'<script type="application/json" class="tw-end">{_json(summary)}</script>\n'


_PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>@TITLE@</title>
<style>
:root{--bg:#fff;--fg:#1f2328;--muted:#656d76;--side:#f6f8fa;--border:#d0d7de;--add:#dafbe1;
--addw:#abf2bc;--del:#ffebe9;--delw:#ff8182;--sel:#ddf4ff;--err:#ffebe9;--hid:#f0f3f6}
[data-theme=dark]{--bg:#0d1117;--fg:#e6edf3;--muted:#8d96a0;--side:#161b22;--border:#30363d;
--add:#12261e;--addw:#1f6f43;--del:#25171c;--delw:#8e1519;--sel:#1c2d41;--err:#3c1618;
--hid:#161b22}
body{margin:0;font:13px system-ui,sans-serif;background:var(--bg);color:var(--fg);display:flex;
height:100vh}
#side{width:320px;min-width:160px;resize:horizontal;overflow:auto;background:var(--side);
border-right:1px solid var(--border)}
#main{flex:1;overflow:auto;padding:8px 14px}
.item{padding:3px 8px;cursor:pointer;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.item.sel{background:var(--sel)}.item .n{color:var(--muted)}
.dot{display:inline-block;width:1.2em;text-align:center}
.changed .dot{color:#1a7f37}.noop .dot{color:var(--muted)}.failed .dot{color:#cf222e}
.codegen .dot{color:#8250df}
.plus{color:#1a7f37}.minus{color:#cf222e}
#tabs button,#sum button,.tb{margin:2px;border:1px solid var(--border);background:var(--bg);
color:var(--fg);border-radius:6px;padding:2px 8px;cursor:pointer}
#tabs button.on,#sum button.on{background:var(--sel)}
table.diff{border-collapse:collapse;width:100%;font:12px ui-monospace,monospace;
table-layout:fixed}
table.diff td{padding:0 4px;white-space:pre-wrap;word-break:break-all;vertical-align:top}
td.ln{width:3.5em;color:var(--muted);text-align:right;user-select:none}
tr.del td.l,td.l.del{background:var(--del)}tr.add td.r,td.r.add{background:var(--add)}
span.dw{background:var(--delw)}span.aw{background:var(--addw)}
tr.hid td{background:var(--hid);text-align:center;cursor:pointer;color:var(--muted)}
.err{background:var(--err);border:1px solid #cf222e;padding:8px;white-space:pre-wrap;
font-family:ui-monospace,monospace;margin:8px 0}
h2{font-size:15px;margin:6px 0}.meta{color:var(--muted)}
pre.src{font:12px ui-monospace,monospace;white-space:pre-wrap;border:1px solid var(--border);
padding:6px;margin:0}
</style>
<script>
"use strict";
const CTX = 3;
let TEXTS = {}, RECS = [], END = null, CUR = -1, PHASE = "all", FILTER = null, EXPAND = false;
const META = @META@;
function esc(s){return s.replace(/[&<>]/g,c=>({"&":"&amp;","<":"&lt;",">":"&gt;"}[c]));}
function dotOf(s){return {changed:"\u25cf",noop:"\u25cb",failed:"\u2715",codegen:"\u25c6"}[s];}
function visible(){return RECS.filter(r=>(PHASE==="all"||r.phase===PHASE)&&
  (!FILTER||r.status===FILTER));}
function words(line){return line.match(/\s+|[A-Za-z0-9_.]+|[^\sA-Za-z0-9_.]/g)||[];}
function wordDiff(a,b){
  const x=words(a),y=words(b);
  if(x.length*y.length>40000)return[`<span class="dw">${esc(a)}</span>`,
    `<span class="aw">${esc(b)}</span>`];
  const n=x.length,m=y.length,L=[];
  for(let i=0;i<=n;i++)L.push(new Int32Array(m+1));
  for(let i=n-1;i>=0;i--)for(let j=m-1;j>=0;j--)
    L[i][j]=x[i]===y[j]?L[i+1][j+1]+1:Math.max(L[i+1][j],L[i][j+1]);
  let i=0,j=0,l="",r="";
  while(i<n||j<m){
    if(i<n&&j<m&&x[i]===y[j]){l+=esc(x[i]);r+=esc(y[j]);i++;j++;}
    else if(j<m&&(i===n||L[i][j+1]>=L[i+1][j])){r+=`<span class="aw">${esc(y[j])}</span>`;j++;}
    else{l+=`<span class="dw">${esc(x[i])}</span>`;i++;}
  }
  return[l,r];
}
function row(cls,ln,l,rn,r,lc,rc){
  return `<tr class="${cls}"><td class="ln">${ln}</td><td class="l ${lc||""}">${l}</td>`+
    `<td class="ln">${rn}</td><td class="r ${rc||""}">${r}</td></tr>`;}
function diffTable(rec){
  const a=TEXTS[rec.before].split("\n"),b=TEXTS[rec.after].split("\n");
  const ops=rec.opcodes.length?rec.opcodes:[["equal",0,a.length,0,b.length]];
  let out=[],hid=0;
  ops.forEach((op,k)=>{
    const [tag,i1,i2,j1,j2]=op;
    if(tag==="equal"){
      const n=i2-i1,first=k===0,last=k===ops.length-1;
      const keepA=first?0:CTX,keepB=last?0:CTX;
      for(let t=0;t<n;t++){
        const html=row("eq",i1+t+1,esc(a[i1+t]),j1+t+1,esc(b[j1+t]));
        if(EXPAND||t<keepA||t>=n-keepB||n<=keepA+keepB+1)
          out.push(html);
        else{
          if(t===keepA){hid++;out.push(`<tr class="hid" data-h="${hid}"><td colspan="4">`+
            `\u2195 Expand ${n-keepA-keepB} unchanged lines</td></tr>`);}
          out.push(html.replace('<tr class="eq"',`<tr class="eq h${hid}" style="display:none"`));
        }
      }
    } else {
      const n=Math.max(i2-i1,j2-j1);
      for(let t=0;t<n;t++){
        const la=i1+t<i2?a[i1+t]:null,lb=j1+t<j2?b[j1+t]:null;
        let l=la===null?"":esc(la),r=lb===null?"":esc(lb);
        if(la!==null&&lb!==null)[l,r]=wordDiff(la,lb);
        out.push(row("ch",la===null?"":i1+t+1,l,lb===null?"":j1+t+1,r,
          la===null?"":"del",lb===null?"":"add"));
      }
    }
  });
  return `<table class="diff"><colgroup><col style="width:3.5em"><col><col style="width:3.5em">`+
    `<col></colgroup>${out.join("")}</table>`;
}
function copyText(t){
  if(navigator.clipboard)navigator.clipboard.writeText(t).catch(()=>{});
  else{const e=document.createElement("textarea");e.value=t;document.body.appendChild(e);
    e.select();document.execCommand("copy");e.remove();}
}
function show(idx){
  CUR=idx;const rec=RECS[idx],main=document.getElementById("main");
  document.querySelectorAll(".item").forEach(e=>e.classList.toggle("sel",+e.dataset.i===idx));
  const sel=document.querySelector(".item.sel");if(sel)sel.scrollIntoView({block:"nearest"});
  let h=`<h2>${String(rec.index).padStart(2,"0")} ${esc(rec.phase)} / ${esc(rec.name)}</h2>`+
    `<div class="meta">status: ${rec.status} &nbsp; <span class="plus">+${rec.add_lines}</span>`+
    ` <span class="minus">-${rec.del_lines}</span> &nbsp; ${(rec.seconds*1000).toFixed(1)} ms `+
    `<button class="tb" id="cpb">Copy before</button><button class="tb" id="cpa">Copy after`+
    `</button></div>`;
  if(rec.status==="failed")
    h+=`<div class="err" id="errbox">${esc(rec.error_msg)}</div><h2>IR before the failing `+
      `pass</h2><pre class="src">${esc(TEXTS[rec.before])}</pre>`;
  else if(rec.status==="codegen")
    h+=`<table class="diff"><tr><td><b>final IR</b><pre class="src">${esc(TEXTS[rec.before])}`+
      `</pre></td><td><b>generated source (.${esc(rec.after_ext)})</b><pre class="src">`+
      `${esc(TEXTS[rec.after])}</pre></td></tr></table>`;
  else h+=(rec.changed?"":`<p class="meta">no change</p>`)+diffTable(rec);
  main.innerHTML=h;
  document.getElementById("cpb").onclick=()=>copyText(TEXTS[rec.before]);
  document.getElementById("cpa").onclick=()=>copyText(TEXTS[rec.after]);
  main.querySelectorAll("tr.hid").forEach(tr=>tr.onclick=()=>{
    main.querySelectorAll("tr.h"+tr.dataset.h).forEach(r=>r.style.display="");tr.remove();});
  main.scrollTop=0;
}
function renderSide(){
  const side=document.getElementById("list");
  side.innerHTML=visible().map(r=>{const i=RECS.indexOf(r);
    return `<div class="item ${r.status}" data-i="${i}" title="${esc(r.phase)}/${esc(r.name)}">`+
      `<span class="dot">${dotOf(r.status)}</span><span class="n">${String(r.index)
      .padStart(2,"0")}</span> ${esc(r.name)} <span class="plus">+${r.add_lines}</span> `+
      `<span class="minus">-${r.del_lines}</span></div>`;}).join("");
  side.querySelectorAll(".item").forEach(e=>e.onclick=()=>show(+e.dataset.i));
}
function renderBars(){
  const phases=["all"];RECS.forEach(r=>{if(!phases.includes(r.phase))phases.push(r.phase);});
  document.getElementById("tabs").innerHTML=phases.map(p=>
    `<button data-p="${esc(p)}" class="${p===PHASE?"on":""}">${esc(p)}</button>`).join("");
  document.querySelectorAll("#tabs button").forEach(b=>b.onclick=()=>{PHASE=b.dataset.p;
    renderBars();renderSide();});
  const count=s=>RECS.filter(r=>r.status===s).length;
  document.getElementById("sum").innerHTML=["changed","noop","failed","codegen"].map(s=>
    `<button data-s="${s}" class="${FILTER===s?"on":""}">${dotOf(s)} ${s==="noop"?"no-op":s}`+
    ` ${count(s)}</button>`).join("");
  document.querySelectorAll("#sum button").forEach(b=>b.onclick=()=>{
    FILTER=FILTER===b.dataset.s?null:b.dataset.s;renderBars();renderSide();});
}
function move(step){
  const vis=visible().map(r=>RECS.indexOf(r));if(!vis.length)return;
  let pos=vis.indexOf(CUR);pos=pos<0?0:Math.min(vis.length-1,Math.max(0,pos+step));
  show(vis[pos]);
}
function setTheme(t){document.documentElement.dataset.theme=t;
  try{localStorage.setItem("tw-trace-theme",t);}catch(e){}}
document.addEventListener("DOMContentLoaded",()=>{
  document.querySelectorAll("script.tw-rec").forEach(s=>{const d=JSON.parse(s.textContent);
    Object.assign(TEXTS,d.texts);RECS.push(d.rec);});
  const end=document.querySelector("script.tw-end");END=end?JSON.parse(end.textContent):null;
  document.getElementById("status").textContent=(END?(END.ok?"finished":"FAILED"):
    "incomplete (compilation still running or killed)")+` \u2014 ${RECS.length} steps`+
    (META.backend?` \u2014 backend ${META.backend}, target ${META.target}`:"");
  renderBars();renderSide();if(RECS.length){const f=RECS.findIndex(r=>r.status==="failed");
    show(f>=0?f:0);}
  document.getElementById("theme").onclick=()=>setTheme(
    document.documentElement.dataset.theme==="dark"?"light":"dark");
  document.addEventListener("keydown",e=>{
    if(e.target.tagName==="INPUT"||e.target.tagName==="TEXTAREA")return;
    if(e.key==="j")move(1);else if(e.key==="k")move(-1);
    else if(e.key==="E"&&e.shiftKey){EXPAND=!EXPAND;if(CUR>=0)show(CUR);}
  });
});
try{document.documentElement.dataset.theme=localStorage.getItem("tw-trace-theme")||"light";}
catch(e){document.documentElement.dataset.theme="light";}
</script></head>
<body><div id="side"><div style="padding:6px 8px"><b>@TITLE@</b>
<button class="tb" id="theme" title="light / dark">&#9680; theme</button>
<div class="meta" id="status"></div><div id="tabs"></div><div id="sum"></div>
<div class="meta">j / k: next / previous &middot; Shift+E: expand all</div></div>
<div id="list"></div></div><div id="main"></div>
"""
