// modelmem viz: one self-contained HTML page of a trace (memory over time per pool, every block
// in address x time), its data as a JSON blob the page's script draws on two canvases.
#include "modelmem/trace/viz.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "modelmem/trace/export.hpp"
#include "modelmem/trace/snapshot.hpp"

namespace modelmem::trace {

namespace {

using alloc::EventKind;

// The page: two canvases sharing one x range. Data is in the JSON blob `DATA` below.
constexpr const char* kPageHead = R"HTML(<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>modelmem trace</title>
<style>
body{font:13px sans-serif;margin:8px;background:#fafafa;color:#222}
canvas{display:block;background:#fff;border:1px solid #ccc;margin:4px 0;cursor:crosshair}
#tip{position:fixed;pointer-events:none;background:#ffe;border:1px solid #999;padding:3px 6px;
 display:none;white-space:pre;font:12px monospace}
button{margin-right:6px}
</style></head><body>
<h3 id="title">modelmem trace</h3>
<div><button id="mode">x axis: time</button><button id="reset">reset zoom</button>
<span>wheel: zoom, drag: pan, hover: details</span> <span id="status">loading</span></div>
<canvas id="mem" width="1200" height="260"></canvas>
<canvas id="blocks" width="1200" height="420"></canvas>
<div id="tip"></div>
<script>
window.onerror=function(m){document.body.setAttribute('data-error',String(m));
 document.getElementById('status').textContent='error: '+m;};
const DATA=)HTML";

constexpr const char* kPageTail = R"HTML(;
(function(){
const $=id=>document.getElementById(id);
$('title').textContent='modelmem trace: '+DATA.name;
const fmtB=b=>{const u=['B','KiB','MiB','GiB','TiB'];let i=0;while(b>=1024&&i<4){b/=1024;i++;}
 return (i?b.toFixed(2):b)+' '+u[i];};
const fmtT=ns=>ns>=1e9?(ns/1e9).toFixed(3)+' s':ns>=1e6?(ns/1e6).toFixed(3)+' ms':
 ns>=1e3?(ns/1e3).toFixed(1)+' us':ns+' ns';
let useTime=true;
const X=(t,e)=>useTime?t:e;
function extent(){let lo=Infinity,hi=-Infinity;for(const s of DATA.series)for(const p of s.points){
 const x=X(p[0],p[1]);lo=Math.min(lo,x);hi=Math.max(hi,x);}
 for(const b of DATA.blocks){lo=Math.min(lo,X(b[2],b[4]));hi=Math.max(hi,X(b[3],b[5]));}
 if(!isFinite(lo)){lo=0;hi=1;}if(hi<=lo)hi=lo+1;return [lo,hi];}
let view=extent();
const colors=['#1f77b4','#d62728','#2ca02c','#9467bd','#ff7f0e','#8c564b','#e377c2','#17becf'];
const mem=$('mem'),blk=$('blocks'),L=70,R=10;
function sx(c,x){return L+(x-view[0])/(view[1]-view[0])*(c.width-L-R);}
function ix(c,px){return view[0]+(px-L)/(c.width-L-R)*(view[1]-view[0]);}
let maxMem=1;for(const s of DATA.series)for(const p of s.points)maxMem=Math.max(maxMem,p[2],p[3]);
const maxAddr=Math.max(1,DATA.address_span);
let clipped=0;
function axes(c,g,label,maxY,fy){g.fillStyle='#000';g.font='11px sans-serif';g.textAlign='left';
 g.fillText(label,4,12);g.strokeStyle='#ddd';for(let i=0;i<=4;i++){const y=c.height-20-i*(c.height-40)/4;
 g.beginPath();g.moveTo(L,y);g.lineTo(c.width-R,y);g.stroke();g.fillText(fy(maxY*i/4),2,y+4);}
 // x ticks with their unit, centred, the last one ending at the plot's right edge (not clipped)
 for(let i=0;i<=6;i++){const x=view[0]+(view[1]-view[0])*i/6;
  const t=useTime?fmtT(x):'event '+Math.round(x),w=g.measureText(t).width;
  const left=Math.min(Math.max(sx(c,x)-w/2,L),c.width-R-w);
  if(left<0||left+w>c.width)clipped++;g.fillText(t,left,c.height-5);}}
function drawMem(){const g=mem.getContext('2d');g.clearRect(0,0,mem.width,mem.height);
 axes(mem,g,DATA.legend,maxMem,fmtB);
 const y=v=>mem.height-20-v/maxMem*(mem.height-40);
 DATA.series.forEach((s,k)=>{g.strokeStyle=colors[k%colors.length];
  for(const col of [2,3]){if(col==3&&!DATA.has_reserved)continue;g.setLineDash(col==3?[4,3]:[]);
   g.beginPath();let prev=0,first=true;for(const p of s.points){const x=sx(mem,X(p[0],p[1]));
    if(first){g.moveTo(x,y(p[col]));first=false;}else{g.lineTo(x,y(prev));g.lineTo(x,y(p[col]));}
    prev=p[col];}g.stroke();}
  g.setLineDash([]);g.fillStyle=colors[k%colors.length];g.fillText(s.name,mem.width-g.measureText(s.name).width-8,14+12*k);});
 g.strokeStyle='#aaa';for(const m of DATA.marks){const x=sx(mem,X(m[0],m[1]));if(x<L)continue;
  g.beginPath();g.moveTo(x,20);g.lineTo(x,mem.height-20);g.stroke();}
 g.fillStyle='#d00';for(const o of DATA.ooms){const x=sx(mem,X(o[0],o[1]));g.fillRect(x-2,20,4,8);}}
function drawBlocks(){const g=blk.getContext('2d');g.clearRect(0,0,blk.width,blk.height);
 axes(blk,g,'blocks: address (gaps compressed) x time',maxAddr,fmtB);
 const y=a=>blk.height-20-a/maxAddr*(blk.height-40);
 for(const b of DATA.blocks){const x0=Math.max(L,sx(blk,X(b[2],b[4]))),x1=Math.min(blk.width-R,sx(blk,X(b[3],b[5])));
  if(x1<L||x0>blk.width-R)continue;const y0=y(b[0]+b[1]),y1=y(b[0]);
  g.fillStyle=colors[b[6]%colors.length];g.globalAlpha=0.6;
  g.fillRect(x0,y0,Math.max(1,x1-x0),Math.max(1,y1-y0));}
 g.globalAlpha=1;}
function draw(){clipped=0;drawMem();drawBlocks();document.body.setAttribute('data-clipped-ticks',clipped);}
function fit(){const w=Math.max(480,document.documentElement.clientWidth-2*8-2);
 if(mem.width!==w){mem.width=w;blk.width=w;}document.body.setAttribute('data-width',w);draw();}
window.addEventListener('resize',fit);
function zoom(e,c){e.preventDefault();const x=ix(c,e.offsetX),f=e.deltaY<0?0.8:1.25;
 view=[x-(x-view[0])*f,x+(view[1]-x)*f];draw();}
let drag=null;
for(const c of [mem,blk]){c.addEventListener('wheel',e=>zoom(e,c),{passive:false});
 c.addEventListener('mousedown',e=>{drag={x:e.offsetX,v:view.slice(),c};});
 c.addEventListener('dblclick',()=>{view=extent();draw();});}
window.addEventListener('mouseup',()=>{drag=null;});
const tip=$('tip');
function showTip(e,text){if(!text){tip.style.display='none';return;}tip.textContent=text;
 tip.style.display='block';tip.style.left=(e.clientX+12)+'px';tip.style.top=(e.clientY+12)+'px';}
window.addEventListener('mousemove',e=>{if(drag){const c=drag.c,d=(e.offsetX-drag.x)/(c.width-L-R)*(drag.v[1]-drag.v[0]);
 if(e.target===c){view=[drag.v[0]-d,drag.v[1]-d];draw();}return;}
 if(e.target===blk){const x=ix(blk,e.offsetX),a=(blk.height-20-e.offsetY)/(blk.height-40)*maxAddr;
  let hit=null;for(const b of DATA.blocks){if(X(b[2],b[4])<=x&&x<=X(b[3],b[5])&&b[0]<=a&&a<=b[0]+b[1]){hit=b;}}
  showTip(e,hit?('size '+fmtB(hit[1])+' ('+hit[1]+' B)\naddress 0x'+hit[7]+'\nalloc '+fmtT(hit[2])+' (event '+hit[4]+')\nfree  '+
   (hit[8]?fmtT(hit[3])+' (event '+hit[5]+')':'never')+'\nlived '+fmtT(hit[3]-hit[2])+'\npool '+hit[6]+(hit[9]?'\nsite '+hit[9]:'')):null);}
 else if(e.target===mem){const x=ix(mem,e.offsetX);let lines=[useTime?fmtT(x):'event '+Math.round(x)];
  for(const s of DATA.series){let lo=0,hi=s.points.length-1,best=-1;while(lo<=hi){const m=(lo+hi)>>1;
   if(X(s.points[m][0],s.points[m][1])<=x){best=m;lo=m+1;}else hi=m-1;}
   if(best>=0)lines.push(s.name+': allocated '+fmtB(s.points[best][2])+(DATA.has_reserved?', reserved '+fmtB(s.points[best][3]):''));}
  showTip(e,lines.join('\n'));}else showTip(e,null);});
$('mode').addEventListener('click',()=>{useTime=!useTime;$('mode').textContent='x axis: '+(useTime?'time':'event index');
 view=extent();draw();});
$('reset').addEventListener('click',()=>{view=extent();draw();});
fit();
$('status').textContent='rendered '+DATA.blocks.length+' blocks, '+DATA.events+' events'+
 (DATA.blocks_dropped?' ('+DATA.blocks_dropped+' smallest blocks not drawn)':'');
document.body.setAttribute('data-rendered','1');
})();
</script></body></html>
)HTML";

// "pool 2", and for a snapshot's pool its id and kind: "pool 2 (0,2) KV cache".
std::string pool_name(const Trace& trace, std::uint32_t pool) {
  std::string name = "pool " + std::to_string(pool);
  if (trace.snapshot && pool < trace.snapshot->pools.size()) {
    const SnapshotPool& p = trace.snapshot->pools[pool];
    if (!p.id.empty()) name += " " + p.id;
    name += " " + p.kind;
  }
  return name;
}

}  // namespace

void write_viz_html(const Trace& trace, std::ostream& out, const VizOptions& options) {
  using nlohmann::json;
  const Blocks blocks = match_blocks(trace);
  bool has_reserved = false;
  const auto series = memory_series(trace, blocks, &has_reserved);
  const std::uint64_t t0 = trace.events.empty() ? 0 : trace.events.front().time_ns;
  const std::uint64_t t_end = trace.events.empty() ? 0 : trace.events.back().time_ns;
  auto rel = [t0](std::uint64_t t) { return t >= t0 ? t - t0 : 0; };

  std::map<std::uint32_t, json> per_pool;
  for (const MemoryPoint& p : series) {
    json& s = per_pool[p.pool];
    if (s.is_null())
      s = {{"pool", p.pool}, {"name", pool_name(trace, p.pool)}, {"points", json::array()}};
    s["points"].push_back({rel(p.time_ns), p.event, p.allocated, p.reserved});
  }
  json series_json = json::array();
  for (auto& [pool, s] : per_pool) series_json.push_back(std::move(s));

  // Blocks to draw: the largest when there are too many.
  std::vector<std::size_t> order(blocks.blocks.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::size_t dropped = 0;
  if (order.size() > options.max_blocks) {
    std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(options.max_blocks),
                     order.end(), [&](std::size_t a, std::size_t b) {
                       return blocks.blocks[a].size > blocks.blocks[b].size;
                     });
    dropped = order.size() - options.max_blocks;
    order.resize(options.max_blocks);
  }
  // Compress the address space: regions of nearby blocks are laid out one after another with a
  // small gap, so a heap at 0x55.. and mmap'ed blocks at 0x7f.. both stay visible.
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return blocks.blocks[a].address < blocks.blocks[b].address;
  });
  std::size_t largest = 1;
  for (std::size_t i : order) largest = std::max(largest, blocks.blocks[i].size);
  const std::uintptr_t max_gap = std::max<std::size_t>(largest, 1 << 20);
  const std::size_t shown_gap = std::max<std::size_t>(largest / 8, 4096);
  std::vector<std::size_t> compact(blocks.blocks.size(), 0);
  std::uintptr_t region_end = 0;
  std::size_t offset = 0;  // compact address of the current region's start
  std::uintptr_t region_start = 0;
  bool first = true;
  for (std::size_t i : order) {
    const Block& b = blocks.blocks[i];
    if (first || b.address > region_end + max_gap) {
      if (!first) offset += (region_end - region_start) + shown_gap;
      region_start = b.address;
      region_end = b.address;
      first = false;
    }
    compact[i] = offset + (b.address - region_start);
    region_end = std::max<std::uintptr_t>(region_end, b.address + b.size);
  }
  const std::size_t span = first ? 0 : offset + (region_end - region_start);

  json blocks_json = json::array();
  for (std::size_t i : order) {
    const Block& b = blocks.blocks[i];
    const bool freed = b.free_index != kNever;
    const std::uint64_t ta = rel(trace.events[b.alloc_index].time_ns);
    const std::uint64_t tf = freed ? rel(trace.events[b.free_index].time_ns) : rel(t_end);
    const std::size_t ef = freed ? b.free_index : trace.events.size();
    char hex[32];
    std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(b.address));
    blocks_json.push_back({compact[i], b.size, ta, tf, b.alloc_index, ef, b.pool, hex, freed,
                           trace.events[b.alloc_index].label});
  }
  json marks = json::array(), ooms = json::array();
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (e.kind == EventKind::kMark) marks.push_back({rel(e.time_ns), i, e.label});
    if (e.kind == EventKind::kOom) ooms.push_back({rel(e.time_ns), i, e.size});
  }
  json data = {{"name", trace.name},
               {"events", trace.events.size()},
               {"has_reserved", has_reserved},
               // A dashed line only where the trace says what was reserved (segment events).
               {"legend", has_reserved ? "memory per pool (solid: allocated, dashed: reserved)"
                                       : "memory per pool (allocated; the trace has no segment "
                                         "events, so nothing reserved is shown)"},
               {"series", series_json},
               {"blocks", blocks_json},
               {"blocks_dropped", dropped},
               {"address_span", span},
               {"marks", marks},
               {"ooms", ooms}};
  // "</" inside a script would end it; JSON allows "<\/".
  std::string blob = data.dump();
  std::string safe;
  safe.reserve(blob.size());
  for (std::size_t i = 0; i < blob.size(); ++i) {
    if (blob[i] == '<' && i + 1 < blob.size() && blob[i + 1] == '/') {
      safe += "<\\/";
      ++i;
    } else {
      safe += blob[i];
    }
  }
  out << kPageHead << safe << kPageTail;
}

VizPage make_viz(const std::filesystem::path& path, const ReadOptions& read,
                 const VizOptions& options) {
  Trace t = read_trace(path, read);
  std::ostringstream out;
  write_viz_html(t, out, options);
  return VizPage{std::move(out).str(), t.events.size(), t.warnings};
}

}  // namespace modelmem::trace
